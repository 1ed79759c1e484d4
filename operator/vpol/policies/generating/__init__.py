"""The GeneratingPolicy kind (and NamespacedGeneratingPolicy): its description of itself (``kind``: ``KIND``), its typed
model and parsing (``model``), the compiling of its expressions and template placeholders (``compile``) and what it
generates for a trigger (``engine``). The operator's triggers and writes are vpol.controller.generation's."""
