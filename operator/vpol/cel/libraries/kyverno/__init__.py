"""Kyverno's CEL libraries: pure ones and the I/O ones served by a backend.

One module per Kyverno library; each exposes ``LIBRARY`` (its name),
``functions()`` (its overloads as :class:`.declarations.Fn`) and, for those
that add top-level variables (``resource``, ``http``, ``globalContext``,
``image``, ``json``, ``yaml``), ``variables()``.

Function names shared by several libraries (``Get``/``get`` on ``resource``,
``http`` and ``globalContext``) must be declared once per environment, so all
overloads are merged by :func:`.declarations.build` and each merged
declaration is handed to the first library that uses the name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

from cel_expr_python import cel

from vpol.cel.libraries.kyverno import (
    format_lib,
    generator_lib,
    globalcontext_lib,
    gzip_lib,
    hash_lib,
    http_lib,
    image_lib,
    imagedata_lib,
    imageverify_lib,
    json_lib,
    math_lib,
    random_lib,
    resource_lib,
    time_lib,
    transform_lib,
    user_lib,
    x509_lib,
    yaml_lib,
)
from vpol.cel.declare import Declarations
from vpol.cel.libraries.kyverno.declarations import build
from vpol.cel.library import Library

_MODULES: tuple[ModuleType, ...] = (
    image_lib,
    user_lib,
    hash_lib,
    math_lib,
    json_lib,
    yaml_lib,
    x509_lib,
    time_lib,
    transform_lib,
    random_lib,
    gzip_lib,
    format_lib,
    resource_lib,
    http_lib,
    globalcontext_lib,
    imagedata_lib,
    generator_lib,
    imageverify_lib,
)


#: Kyverno functions whose name cel-go's extensions in Kyverno's environment already declare (``math.round``
#: of the math extension takes one double; Kyverno's math library adds ``math.round(double, int)``): they
#: extend the existing function through a CelExtension (vpol.cel.libraries.kubernetes.overloads explains why).
EXTENDED_NAMES = frozenset({"math.round"})


@functools.cache
def _built() -> Declarations:
    return build((fn for module in _MODULES for fn in module.functions()), EXTENDED_NAMES)


def _declarations() -> dict[str, list[cel.FunctionDecl]]:
    return _built().by_library


def extensions() -> list[cel.CelExtension]:
    """Overloads extending functions of the environment's own extensions, for Kyverno's environments."""
    return [cel.CelExtension("kyverno.extended", list(_built().extended))]


def _functions_of(name: str) -> Callable[[], Sequence[cel.FunctionDecl]]:
    return lambda: _declarations().get(name, [])


def _variables_of(module: ModuleType) -> Callable[[], Mapping[str, tuple[cel.Type, Any]]]:
    return lambda: module.variables() if hasattr(module, "variables") else {}


LIBRARIES: list[Library] = [
    Library(name=module.LIBRARY, kubernetes=False, functions=_functions_of(module.LIBRARY), variables=_variables_of(module))
    for module in _MODULES
]
