"""The ValidatingPolicy kind (and NamespacedValidatingPolicy): its typed model and parsing (``model``), the compiling
of its expressions and the memoized verdict (``compile``), its evaluation with its autogen variants (``engine``, first
as one fused program: ``fused``), its pod-controller variants (``autogen``) and the ValidatingAdmissionPolicies it
generates (``vap``). Its reconcile, webhook and background scans are vpol.controller's."""
