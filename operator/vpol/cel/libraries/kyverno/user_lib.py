"""Kyverno's user library: ``parseServiceAccount(username)`` (also ``user.parseServiceAccount``).

For ``system:serviceaccount:<namespace>:<name>`` it returns an object whose
``Namespace`` and ``Name`` fields hold the two parts (the name keeps any
further colons); for any other username both fields are empty strings.
Field names are capitalised as in Kyverno (a Go struct exposed to CEL).
"""

from __future__ import annotations

from collections.abc import Sequence

from vpol.cel import types
from vpol.cel.declare import STRING
from vpol.cel.libraries.kyverno.declarations import Fn

LIBRARY = "kyverno.user"
_PREFIX = "system:serviceaccount:"

SERVICE_ACCOUNT_TYPE, ServiceAccount = types.opaque_type(
    "vpol.kyverno.ServiceAccount", {"Name": "string", "Namespace": "string"}
)


def parse_service_account(username: str) -> object:
    if username.startswith(_PREFIX):
        namespace, sep, name = username[len(_PREFIX):].partition(":")
        if sep:
            return ServiceAccount(Namespace=namespace, Name=name)
    return ServiceAccount()


def functions() -> Sequence[Fn]:
    return [
        Fn(LIBRARY, "parseServiceAccount", "kyverno_parse_service_account_string", SERVICE_ACCOUNT_TYPE, (STRING,), parse_service_account),
        Fn(LIBRARY, "user.parseServiceAccount", "kyverno_user_parse_service_account_string", SERVICE_ACCOUNT_TYPE, (STRING,), parse_service_account),
    ]
