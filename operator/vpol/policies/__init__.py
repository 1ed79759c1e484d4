"""The policy kinds vpol serves: one package per kind, side by side (``validating``, ``mutating``, ``generating``,
``deleting``, ``image_validating``), each with the kind's description of itself (``kind.KIND``, a
vpol.model.kind.PolicyKind), model, compile, engine and, where the kind has them, its autogen and the native objects
it generates. A kind package imports the shared layers (vpol.model, vpol.cel, vpol.engine, vpol.desired) and never
another kind's package.

Over them: ``registry`` (the kinds' descriptions collected, the one module naming every kind) and what works on any
kind through it: ``sandbox`` (bounded evaluation in worker processes), ``policy_validation`` (apply-time validation)
and ``inline`` (admission requests answered in the serving process). All of it is pure: no Kubernetes or registry I/O
(import-linter contracts in pyproject.toml)."""
