"""What a CEL library is to the environment: declarations plus where they run.

Each module in ``vpol.cel.libraries`` exposes one ``LIBRARY``. A library
declares functions (with their Python implementations, so one declaration
serves both type checking and evaluation) and, for Kyverno's I/O libraries,
top-level variables such as ``resource`` or ``http`` whose member functions
do the I/O through the pluggable backend (``vpol.cel.backend``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel


@dataclass(frozen=True)
class Library:
    name: str
    #: True when the kube-apiserver's CEL environment has this library too,
    #: so expressions using it can go into a native ValidatingAdmissionPolicy.
    kubernetes: bool
    #: Builds the declarations (called once per process).
    functions: Callable[[], Sequence[cel.FunctionDecl]]
    #: Top-level variables this library adds: name -> (type, runtime value).
    variables: Callable[[], Mapping[str, tuple[cel.Type, Any]]] = field(
        default=lambda: {}
    )
