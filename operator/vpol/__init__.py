"""vpol: a Kubernetes operator and offline CLI for Kyverno's CEL policies: ValidatingPolicy, MutatingPolicy,
GeneratingPolicy, DeletingPolicy and ImageValidatingPolicy (each also namespaced), PolicyException and
GlobalContextEntry.

Layers, lowest first (enforced by import-linter, see pyproject.toml): ``model`` (typed policies), ``cel``
(environment, libraries, compiler, type checker), ``engine`` (matching, evaluation, autogen, generation,
image verification), ``desired`` (the objects vpol writes: VAPs, MAPs, bindings, webhook configurations,
reports, status), ``kube`` and ``oci`` (the only Kubernetes API and registry clients), ``controller`` (Kopf
handlers, one reconcile loop over each kind's plan, the webhooks, the scanner and its runners), ``cli``. The kinds
are registered once, in ``vpol.policies.registry``.
"""

__version__ = "0.1.0"
