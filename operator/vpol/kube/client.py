"""Creating Kubernetes API clients from a kubeconfig or the in-cluster service account."""

from __future__ import annotations

import os

from kubernetes import client, config


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """A client for ``kubeconfig`` (or $KUBECONFIG, ~/.kube/config), else the in-cluster account."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        try:
            return config.new_client_from_config(config_file=path, context=context)
        except config.ConfigException:
            if path:
                raise
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
