"""CEL environments for every policy kind.

An environment is cel-expr-python's ``Env`` with the cel-go extensions the
API server enables (strings v2, optional syntax, sets, lists, two-variable
comprehensions, bindings), our implementations of the Kubernetes and
Kyverno libraries, and the policy's variables. Environments are cached by
what distinguishes them; building one costs milliseconds, compiling against
one ~0.1 ms.

Two flavours exist (see ../shared/NOTES.md, cel-expr-python): a *run* environment
where ``object``/``oldObject`` are ``dyn`` and evaluation uses plain dicts,
and a *check* environment where they are schema-derived message types, used
only for type checking.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.libraries import all_libraries, kubernetes, kubernetes_libraries
from vpol.cel.libraries.kyverno import extensions as kyverno_extensions
from vpol.cel.libraries.kyverno.generator_lib import NAMESPACED_GENERATOR_TYPE
from vpol.cel.libraries.kyverno.generator_lib import VARIABLE as GENERATOR_VARIABLE
from vpol.cel.library import Library

T = cel.Type

#: cel-go extensions that Kubernetes' base environment enables.
_K8S_EXTENSIONS_YAML = """
name: vpol
extensions:
  - name: lists
  - name: sets
  - name: two-var-comprehensions
  - name: optional
  - name: strings
    version: 2
"""
#: Kyverno's environment adds cel-go's bindings (cel.bind), encoders (base64.encode/decode), math
#: (math.greatest/least, ceil, floor, round, trunc, abs, sign, isInf/isNaN/isFinite, bit operations, sqrt) and
#: regex (regex.replace/extract/extractAll) extensions (pkg/cel/compiler DefaultEnvOptions); the API server's
#: environment has none of them.
_EXTENSIONS_YAML = _K8S_EXTENSIONS_YAML + """\
  - name: bindings
  - name: encoders
  - name: math
  - name: regex
"""

#: The variables every ValidatingPolicy expression may use (Kubernetes mode).
POLICY_VARIABLES: tuple[str, ...] = ("object", "oldObject", "request", "namespaceObject", "variables", "exceptions")
#: JSON mode has only the payload and the policy's variables.
JSON_VARIABLES: tuple[str, ...] = ("object", "variables", "exceptions")


@dataclass(frozen=True)
class EnvSpec:
    """What distinguishes one environment from another."""

    #: "Kubernetes" or "JSON".
    mode: str = "Kubernetes"
    #: Only libraries the kube-apiserver has (for native VAP eligibility).
    kubernetes_only: bool = False
    #: Full message name typing ``object``/``oldObject``; empty means dyn.
    object_type: str = ""
    #: Full message name typing ``variables``; empty means map(string, dyn).
    variables_type: str = ""
    #: CEL container (name resolution scope): where ``Object...`` literal types are declared
    #: for type-checking mutations (vpol.cel.object_types); empty for none.
    container: str = ""
    #: A GeneratingPolicy's environment ("cluster") or a NamespacedGeneratingPolicy's ("namespaced"): the
    #: ``generator`` variable is declared only there, as in Kyverno, with ``Apply(namespace, objects)`` in the
    #: first and ``Apply(objects)`` in the second.
    generating: str = ""
    #: An ImageValidatingPolicy's environment: ``images``, ``attestors`` and ``attestations`` declared, the
    #: imageverify functions added, no ``exceptions`` and no x509 library, as in Kyverno's ivpol compiler.
    image_validating: bool = False
    #: The environment of an ImageValidatingPolicy's ``matchImageReferences[].expression``: only ``ref`` (the
    #: image reference, a string), as in Kyverno.
    image_reference: bool = False


#: Libraries declared only in (or left out of) an ImageValidatingPolicy's environments.
IMAGE_ONLY_LIBRARIES = frozenset({"kyverno.imageverify"})
NOT_IN_IMAGE_LIBRARIES = frozenset({"kyverno.x509"})
#: The variables an ImageValidatingPolicy's expressions have besides the policy's (Kyverno's types: each
#: extractor's image list, the attestors as written, each attestation's name).
IMAGE_VARIABLES: dict[str, cel.Type] = {
    "images": T.Map(T.STRING, T.List(T.STRING)),
    "attestors": T.Map(T.STRING, T.DYN),
    "attestations": T.Map(T.STRING, T.STRING),
}
#: An ImageValidatingPolicy's own variables: no ``exceptions``; in JSON mode only the payload (Kyverno declares
#: request, oldObject, namespaceObject and variables in Kubernetes mode only).
IMAGE_POLICY_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")
IMAGE_JSON_VARIABLES = ("object",)


_LOCK = threading.Lock()


def _libraries(kubernetes_only: bool) -> Sequence[Library]:
    return kubernetes_libraries() if kubernetes_only else all_libraries()


@functools.cache
def _function_decls(kubernetes_only: bool, image_validating: bool = False) -> tuple[cel.FunctionDecl, ...]:
    decls: list[cel.FunctionDecl] = []
    for lib in _libraries(kubernetes_only):
        if lib.name in (NOT_IN_IMAGE_LIBRARIES if image_validating else IMAGE_ONLY_LIBRARIES):
            continue
        decls.extend(lib.functions())
    return tuple(decls)


@functools.cache
def library_variables(kubernetes_only: bool = False) -> Mapping[str, tuple[cel.Type, Any]]:
    out: dict[str, tuple[cel.Type, Any]] = {}
    for lib in _libraries(kubernetes_only):
        out.update(lib.variables())
    return out


def variable_types(spec: EnvSpec) -> dict[str, cel.Type]:
    if spec.image_reference:
        return {"ref": T.STRING}
    obj = T(spec.object_type) if spec.object_type else T.DYN
    names: tuple[str, ...]
    if spec.image_validating:
        names = IMAGE_JSON_VARIABLES if spec.mode == "JSON" else IMAGE_POLICY_VARIABLES
    else:
        names = JSON_VARIABLES if spec.mode == "JSON" else POLICY_VARIABLES
    declared: dict[str, cel.Type] = {
        "object": obj,
        "oldObject": obj,
        "request": T.DYN,
        "namespaceObject": T.DYN,
        "variables": T(spec.variables_type) if spec.variables_type else T.Map(T.STRING, T.DYN),
        "exceptions": T.DYN,
    }
    out = {name: declared[name] for name in names}
    if spec.image_validating:
        out.update(IMAGE_VARIABLES)
    for name, (typ, _value) in library_variables(spec.kubernetes_only).items():
        if name != GENERATOR_VARIABLE:
            out[name] = typ
        elif spec.generating:
            out[name] = NAMESPACED_GENERATOR_TYPE if spec.generating == "namespaced" else typ
    return out


#: Environments kept. Each holds ~0.7 MiB of cel-cpp registries and a policy with
#: variables needs its own (its ``variables`` message), so a large cache costs the
#: operator hundreds of MiB with hundreds of policies while saving little: a policy
#: is compiled when it changes, and compiling one reuses its own few environments.
#: Measured, 16 PSS policies compiled and type-checked: 512 entries 122 MiB / 115 ms,
#: 32 entries 115 MiB / 129 ms, 8 entries 98 MiB / 178 ms.
ENVIRONMENT_CACHE = 8


@functools.lru_cache(maxsize=ENVIRONMENT_CACHE)
def environment(spec: EnvSpec = EnvSpec()) -> cel.Env:
    """The (cached) environment for ``spec``."""
    with _LOCK:
        return cel.NewEnv(
            descriptor_pool=types.POOL,
            config=cel.NewEnvConfigFromYaml(
                (_K8S_EXTENSIONS_YAML if spec.kubernetes_only else _EXTENSIONS_YAML)
                + (f"container: {spec.container}\n" if spec.container else "")),
            variables=variable_types(spec),
            # Overloads added to functions the environment already has (string(), indexOf
            # on lists...) can only come through an extension; new functions come through
            # `functions=`.
            extensions=kubernetes.extensions() + ([] if spec.kubernetes_only else kyverno_extensions()),
            functions=list(_function_decls(spec.kubernetes_only, spec.image_validating)),
        )
