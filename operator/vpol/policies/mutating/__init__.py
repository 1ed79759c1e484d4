"""The MutatingPolicy kind (and NamespacedMutatingPolicy): its description of itself (``kind``: ``KIND``), its typed
model and parsing (``model``), the compiling of its mutations (``compile``), their evaluation at admission and on
existing objects (``engine``, with the targets of ``mutate_existing``), its pod-controller variants (``autogen``) and
the MutatingAdmissionPolicies it generates (``map``). Its reconcile, webhook and background runs are
vpol.controller's."""
