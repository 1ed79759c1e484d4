"""The ImageValidatingPolicy kind (and NamespacedImageValidatingPolicy): its description of itself (``kind``: ``KIND``),
its typed model and parsing (``model``), the compiling of its expressions (``compile``), its evaluation with the
images' verification (``engine``, over vpol.engine.image_verification) and its pod-controller variants (``autogen``).
The admission webhook's and the background scans' use of it are vpol.controller's."""
