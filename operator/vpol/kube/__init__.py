"""The only layer that talks to the Kubernetes API (client setup, apply, lookups, access reviews)."""
