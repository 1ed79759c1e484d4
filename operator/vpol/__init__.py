"""vpol: a Kubernetes operator and offline CLI for Kyverno's CEL policies: ValidatingPolicy, MutatingPolicy,
GeneratingPolicy, DeletingPolicy and ImageValidatingPolicy (each also namespaced), PolicyException and
GlobalContextEntry.

Layers, lowest first (enforced by import-linter, see pyproject.toml): ``model`` (what the kinds' typed models
share, parsing), ``cel`` (environment, libraries, compile_expression, type checker), ``engine`` (matching, the
evaluation runtime, autogen's shared rewrite, merges and patches, image verification), ``desired`` (the objects
vpol writes: what generated VAPs and MAPs share, webhook configurations, reports, status), ``policies`` (one package
per kind, side by side, each with its model, compile, engine, autogen and generated objects; over them the kind
registry, ``vpol.policies.registry``, and what works on any kind through it), ``kube`` and ``oci`` (the only
Kubernetes API and registry clients), ``controller`` (Kopf handlers, one reconcile loop over each kind's plan, the
webhooks, the scanner and its runners), ``cli``.
"""

__version__ = "0.1.0"
