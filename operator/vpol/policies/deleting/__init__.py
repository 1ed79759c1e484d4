"""The DeletingPolicy kind (and NamespacedDeletingPolicy): its description of itself (``kind``: ``KIND``), its typed
model and parsing (``model``), the compiling of its variables and conditions (``compile``) and which objects it
deletes (``engine``). The operator's schedule and deletions are vpol.controller.deletion's."""
