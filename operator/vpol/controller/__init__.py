"""The operator: Kopf handlers, the reconcile loop, status, scans and metrics (thin over the core)."""
