"""Reading OCI registries (I/O: a shell beside vpol.kube, used by the operator and the CLI)."""
