"""Creating Kubernetes API clients from a kubeconfig or the in-cluster service account.

Every call gets a default timeout: the generated client waits forever on a
hung connection otherwise, and a handful of hung reconciles would stall the
operator while its liveness probe stays green.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, config

#: (connect, read) seconds for calls that set no timeout of their own.
DEFAULT_TIMEOUT = (10.0, 60.0)
#: Pooled connections per client. The generated client's default (5 per core) is less
#: than the operator uses at once (a watch per scanned kind, the 16 report writers,
#: reconciles), and every connection beyond the pool is dropped after use, so the
#: next call pays a new TLS handshake.
POOL_SIZE = 48
#: The kubeconfig loader's credential refresh runs at most this often (seconds).
REFRESH_INTERVAL = 1.0


class TimeoutApiClient(client.ApiClient):
    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = DEFAULT_TIMEOUT
        return super().call_api(*args, **kwargs)


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """A client for ``kubeconfig`` (or $KUBECONFIG, ~/.kube/config), else the in-cluster account."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, POOL_SIZE)
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
            throttle_refresh(configuration)
            return TimeoutApiClient(configuration)
        except config.ConfigException:
            if path:
                raise
    config.load_incluster_config(client_configuration=configuration)
    throttle_refresh(configuration)
    return TimeoutApiClient(configuration)


def throttle_refresh(configuration: client.Configuration, interval: float = REFRESH_INTERVAL) -> None:
    """Run the loaders' credential refresh hook at most every ``interval`` seconds.

    The generated client calls it before every request. The kubeconfig loader's hook re-applies the whole
    cluster configuration each time, and setting ``host`` scans the process environment for proxy settings:
    ~0.3 ms per request, a fifth of the client's cost of a report write. What the hook is for still
    happens: both loaders renew a token only when it is due (the kubeconfig loader 5 minutes before its
    expiry, the in-cluster loader once a minute), and a second's delay changes neither.
    """
    hook: Callable[[Any], None] | None = getattr(configuration, "refresh_api_key_hook", None)
    if hook is None:
        return
    last = [float("-inf")]
    #: The loader's hook to run next: either loader's hook (kubeconfig, in-cluster) re-applies the configuration,
    #: and with it installs a new hook of its own in the configuration's refresh_api_key_hook; put back each time,
    #: the throttle stays (replaced, every later request ran the whole refresh again).
    current = [hook]

    def throttled(cfg: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= interval:
            last[0] = now
            current[0](cfg)
            installed = getattr(cfg, "refresh_api_key_hook", None)
            if installed is not throttled:
                if installed is not None:
                    current[0] = installed
                cfg.refresh_api_key_hook = throttled

    configuration.refresh_api_key_hook = throttled  # type: ignore[assignment]  # the stubs declare it None
