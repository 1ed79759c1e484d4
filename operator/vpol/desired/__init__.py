"""Pure builders of desired Kubernetes objects: generated VAPs and bindings, PolicyReports."""
