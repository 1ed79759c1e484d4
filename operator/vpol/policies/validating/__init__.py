"""The ValidatingPolicy kind (and NamespacedValidatingPolicy): its description of itself (``kind``: ``KIND``), its typed
model and parsing (``model``), the compiling of its expressions and the memoized verdict (``compile``), its
evaluation with its autogen variants (``engine``, first as one fused program: ``fused``), its pod-controller variants
(``autogen``), the ValidatingAdmissionPolicies it generates (``vap``) and whether they or vpol's webhook enforce it
(``enforcement``). Its reconcile, webhook and background scans are vpol.controller's."""
