"""CEL for every policy kind: environments, the Kubernetes and Kyverno libraries, the compiler, the type checker and
the cel-go compatibility front end (``compat``)."""
