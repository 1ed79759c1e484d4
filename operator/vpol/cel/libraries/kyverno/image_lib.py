"""Kyverno's image library: ``parseImageReference``, ``image``, ``isImage`` and the Image members.

``parseImageReference(s)`` (and its deprecated alias ``image(s)``) returns an
opaque Image with ``registry()``, ``repository()``, ``identifier()``,
``identifierWithSeparator()``, ``tag()``, ``digest()`` and
``containsDigest()``; an unparsable string is an evaluation error
(``could not parse reference: ...``). ``isImage(s)`` tells whether it parses.
Parsing rules: :mod:`.imageref`.

The Image value is a message holding the original string and its parts; two
Images are equal when they were parsed from the same string, as in Kyverno
(which compares the parsed references field by field, original included).
"""

from __future__ import annotations

from collections.abc import Sequence

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.declare import BOOL, STRING, message
from vpol.cel.libraries.kyverno import imageref
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.image"

IMAGE_TYPE, Image = types.opaque_type(
    "vpol.kyverno.Image",
    {"original": "string", "registry": "string", "repository": "string", "tag": "string", "digest": "string"},
)
_IMAGE = message(IMAGE_TYPE, Image)


def to_image(ref: imageref.Reference) -> object:
    return Image(original=ref.original, registry=ref.registry, repository=ref.repository, tag=ref.tag, digest=ref.digest)


def _parse(s: str) -> object:
    return to_image(imageref.parse(s))


def _is_image(s: str) -> bool:
    try:
        imageref.parse(s)
    except imageref.BadReference:
        return False
    return True


def _reference(img: object) -> imageref.Reference:
    return imageref.parse(img.original)  # type: ignore[attr-defined]


def _identifier(img: object) -> str:
    return img.digest or img.tag  # type: ignore[attr-defined]


def _identifier_with_separator(img: object) -> str:
    return _reference(img).identifier_with_separator


def functions() -> Sequence[Fn]:
    T = cel.Type
    members = [
        ("registry", "registry", T.STRING, lambda i: i.registry),
        ("repository", "repository", T.STRING, lambda i: i.repository),
        ("identifier", "identifier", T.STRING, _identifier),
        ("identifierWithSeparator", "identifier_with_separator", T.STRING, _identifier_with_separator),
        ("tag", "tag", T.STRING, lambda i: i.tag),
        ("digest", "digest", T.STRING, lambda i: i.digest),
        ("containsDigest", "contains_digest", T.BOOL, lambda i: bool(i.digest)),
    ]
    out = [
        Fn(LIBRARY, "parseImageReference", "kyverno_parse_image_reference_string", IMAGE_TYPE, (STRING,), _parse),
        Fn(LIBRARY, "image", "kyverno_image_string", IMAGE_TYPE, (STRING,), _parse),
        Fn(LIBRARY, "isImage", "kyverno_is_image_string", BOOL.type, (STRING,), _is_image),
    ]
    for name, suffix, result, impl in members:
        out.append(Fn(LIBRARY, name, f"kyverno_image_{suffix}", result, (_IMAGE,), impl, member=True))
    return out
