"""Starting the operator: ``vpol run``."""

from __future__ import annotations

import asyncio
import getpass
import logging
import os
import secrets
import socket

import kopf
import uvloop
from kopf._core.engines.peering import Identity  # Kopf's NewType for peering identities (not re-exported)

from vpol.controller import handlers  # noqa: F401 - registers the Kopf handlers
from vpol.controller import metrics
from vpol.controller.allocator import limit_arenas
from vpol.controller.runtime import Options, Runtime
from vpol.kube.client import api_client


def login_from(rt: Runtime) -> None:
    """Make Kopf use the same credentials as our own client."""
    cfg = rt.api.configuration

    @kopf.on.login()
    def login(**_: object) -> kopf.ConnectionInfo:
        keys: dict[str, str] = dict(cfg.api_key or {})
        header = keys.get("authorization", "") or keys.get("BearerToken", "")
        scheme, _sep, token = header.partition(" ") if " " in header else ("Bearer", "", header)
        return kopf.ConnectionInfo(
            server=cfg.host,
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            username=cfg.username or None,
            password=cfg.password or None,
            scheme=scheme if token else None,
            token=token or None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
        )


def peering_identity() -> Identity:
    """This replica's name in Kopf peering.

    Kopf's own default asks getpass for the user name, which fails for a numeric user without
    a passwd entry (the image's 65532, any `runAsUser` in a pod): name the pod (or host) instead.
    """
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return Identity(f"{user}@{host}/{os.getpid()}")


def peering_priority() -> int:
    """A priority of this replica's own in Kopf peering, when none is given.

    Kopf lets the live peer of the highest priority handle events and pauses the others; peers that share the
    highest priority are all paused ("Possibly conflicting operators with the same priority"), for good. Replicas
    of one Deployment get the same arguments, so a fixed default left every replica of the chart paused once they
    saw each other: policies were reconciled only at start and by the periodic resync. Drawn at random, exactly
    one replica handles events; when it goes, the next highest resumes (at once after a clean exit, which removes
    it from the peering object; after the peering lifetime when it was killed).
    """
    return secrets.randbelow(2**31 - 1) + 1


#: The operator's event loop: uvloop's (libuv), which Kopf's own CLI also picks when it is installed. The
#: admission webhook's HTTPS serving, every watch and the API calls run on it. Against asyncio's selector loop the
#: webhook's serving path took 5% less CPU per request in process, and in `bench/admission.py --peer kyverno` (with
#: a cheaper metrics update of the same commit) less in five of six phases, by up to 28% at 50 clients
#: (bench/results/admission.md, 2026-12-07).
new_event_loop = uvloop.new_event_loop


def run(options: Options) -> None:
    limit_arenas()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rt = Runtime(options=options, api=api_client(options.kubeconfig, options.context))
    login_from(rt)
    metrics.serve(options.metrics_port)
    # asyncio.Runner closes the loop as asyncio.run would (tasks cancelled, async generators and the default
    # executor shut down).
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        kopf.run(
            loop=runner.get_loop(),
            clusterwide=True,
            standalone=not options.peering,
            peering_name=options.peering or None,
            priority=options.priority if options.priority is not None else peering_priority(),
            identity=peering_identity(),
            liveness_endpoint=f"http://0.0.0.0:{options.liveness_port}/healthz",
            memo=kopf.Memo(vpol=rt),
        )
