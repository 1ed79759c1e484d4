"""Kyverno's imagedata library: ``image.GetMetadata(ref)`` (also ``getMetadata``), served by the backend.

``image`` is a variable here; the global function ``image(s)`` of the image
library coexists with it. The result is the image's registry metadata (dyn):
``image``, ``resolvedImage``, ``registry``, ``repository``, ``identifier``,
``manifest``, ``config``, ``digest``... Failures are CEL errors ``<call>:
failed to get image data: <reason>``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import STRING, message
from vpol.cel.libraries.kyverno.backend_call import call, describe
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.imagedata"

IMAGE_DATA_TYPE, ImageDataContext = types.opaque_type("vpol.kyverno.ImageDataContext", {})
_CTX = message(IMAGE_DATA_TYPE, ImageDataContext)


def get_metadata(name: str, ref: str) -> Any:
    return call(describe(f"image.{name}", ref), "failed to get image data", lambda b: b.image_metadata(ref))


def variables() -> dict[str, tuple[cel.Type, Any]]:
    return {"image": (IMAGE_DATA_TYPE, ImageDataContext())}


def functions() -> Sequence[Fn]:
    return [
        Fn(LIBRARY, name, f"kyverno_imagedata_get_metadata_{style}", cel.Type.DYN, (_CTX, STRING),
           lambda _c, ref, n=name: get_metadata(n, ref), member=True)
        for name, style in (("GetMetadata", "pascal"), ("getMetadata", "camel"))
    ]
