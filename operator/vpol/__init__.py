"""vpol: a Kyverno-compatible ValidatingPolicy operator and offline CLI.

Layers, lowest first (enforced by import-linter, see pyproject.toml):
``model`` (typed policies), ``cel`` (environment, libraries, compiler),
``engine`` (matching, evaluation, autogen), ``build`` (desired VAPs and
reports), ``kube`` (the only API client code), ``controller`` (Kopf
handlers), ``cli``.
"""

__version__ = "0.1.0"
