"""Kubernetes format library: ``format.<name>()``, ``format.named()`` and ``<Format>.validate()``.

Validations and messages are those of k8s.io/apiserver/pkg/cel/library/
format.go (Kubernetes 1.37): the apimachinery name validations (see
:mod:`.names`), ``uri`` through Go's ``url.ParseRequestURI``, and the
kube-openapi ``strfmt`` checks for ``uuid``, ``byte``, ``date`` and
``datetime``.

Kubernetes returns optionals: ``format.named(name)`` is
``optional(Format)`` and ``validate(s)`` is ``optional(list(string))``
(none when valid). cel-expr-python cannot return an optional from a Python
function, so in the evaluating environment:

* ``format.named(name)`` returns a Format whose name is empty when the
  format does not exist, and ``hasValue()`` and ``value()`` are defined on
  Format to behave like the optional's;
* ``validate(s)`` returns the list of errors (empty when valid), and
  ``hasValue()`` and ``value()`` are defined on ``list(string)`` the same way.

So the documented uses (``!format.dns1123Label().validate(x).hasValue()``,
``....validate(x).value().join(', ')``, ``format.named(n).value()``) work;
other optional operations on these results (``.orValue()``, ``.or()``,
``.optMap()``, ``== optional.none()``) do not: cel-cpp evaluates
``orValue``/``or`` itself and only on real optionals, so they are not
declared here (a compile error rather than a runtime one). The check-only
declarations (:func:`vpol.cel.libraries.kubernetes.check_extension`) type
these results ``dyn``, which accepts every use Kubernetes accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from vpol.cel import types
from vpol.cel.declare import STRING, Fn, T, list_of
from vpol.cel.libraries.kubernetes import gourl, names
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError, message

LIBRARY = "kubernetes.format"

FORMAT_TYPE, FormatMessage = types.opaque_type("kubernetes.NamedFormat", {"name": "string"})
_FORMAT = message(FORMAT_TYPE, FormatMessage)
_ERRORS = list_of(T.STRING)

# kube-openapi strfmt patterns (Go's "^...$": the whole text).
_UUID = re.compile(r"(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
_DATE_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")
_DIGITS = frozenset("0123456789")


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def is_date(text: str) -> bool:
    """Go's ``time.Parse("2006-01-02", text)`` succeeds."""
    if len(text) != 10 or text[4] != "-" or text[7] != "-":
        return False
    year_text, month_text, day_text = text[:4], text[5:7], text[8:10]
    if not all(c in _DIGITS for c in year_text + month_text + day_text):
        return False
    year, month, day = int(year_text), int(month_text), int(day_text)
    return 1 <= month <= 12 and 1 <= day <= _days_in(month, year)


def is_datetime(text: str) -> bool:
    """kube-openapi's ``strfmt.IsDateTime``."""
    if len(text) < 4:
        return False
    parts = text.lower().split("t")
    if len(parts) < 2 or not is_date(parts[0]):
        return False
    match = _DATE_TIME.fullmatch(parts[1])
    if match is None:
        return False
    return match.group(1) <= "23" and match.group(2) <= "59" and match.group(3) <= "59"


def _uri(text: str) -> list[str]:
    try:
        gourl.parse_request_uri(text)
    except gourl.URLError as exc:
        return [str(exc)]
    return []


def _prefixed(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    return lambda text: check(names.mask_trailing_dash(text))


def _single(ok: Callable[[str], bool], error: str) -> Callable[[str], list[str]]:
    return lambda text: [] if ok(text) else [error]


#: Format name -> validation returning the error messages.
FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": names.is_dns1123_label,
    "dns1123Subdomain": names.is_dns1123_subdomain,
    "dns1035Label": names.is_dns1035_label,
    "qualifiedName": names.is_qualified_name,
    "dns1123LabelPrefix": _prefixed(names.is_dns1123_label),
    "dns1123SubdomainPrefix": _prefixed(names.is_dns1123_subdomain),
    "dns1035LabelPrefix": _prefixed(names.is_dns1035_label),
    "labelValue": names.is_label_value,
    "uri": _uri,
    "uuid": _single(lambda s: _UUID.fullmatch(s) is not None, "does not match the UUID format"),
    "byte": _single(lambda s: _BASE64.fullmatch(s) is not None, "invalid base64"),
    "date": _single(is_date, "invalid date"),
    "datetime": _single(is_datetime, "invalid datetime"),
}

_NONE = "optional.none() dereference"


def named(name: str) -> Any:
    return FormatMessage(name=name if name in FORMATS else "")


def validate(fmt: Any, text: str) -> list[str]:
    check = FORMATS.get(fmt.name)
    if check is None:
        raise KubernetesLibraryError("no such overload")
    return check(text)


def _format_has_value(fmt: Any) -> bool:
    return bool(fmt.name)


def _format_value(fmt: Any) -> Any:
    if not fmt.name:
        raise KubernetesLibraryError(_NONE)
    return fmt


def _errors_has_value(errors: list[str]) -> bool:
    return bool(errors)


def _errors_value(errors: list[str]) -> list[str]:
    if not errors:
        raise KubernetesLibraryError(_NONE)
    return errors


def functions() -> list[Fn]:
    fmt, errs = _FORMAT, _ERRORS
    # Optional types cannot be declared from Python either (they come out as
    # dyn), so the check-only declarations say dyn: that accepts everything
    # Kubernetes accepts on an optional (orValue, or, optMap...).
    optional_format = optional_errors = T.DYN
    fns = [
        Fn(LIBRARY, f"format.{name}", f"format.{name}", (), FORMAT_TYPE, lambda name=name: FormatMessage(name=name))
        for name in FORMATS
    ]
    fns += [
        Fn(LIBRARY, "format.named", "format-named", (STRING,), FORMAT_TYPE, named, env="run"),
        Fn(LIBRARY, "format.named", "format-named-optional", (STRING,), optional_format, named, env="check"),
        Fn(LIBRARY, "validate", "format-validate", (fmt, STRING), T.List(T.STRING), validate, member=True,
           env="run"),
        Fn(LIBRARY, "validate", "format-validate-optional", (fmt, STRING), optional_errors, validate, member=True,
           env="check"),
        # The optional emulation (run environment only).
        Fn(LIBRARY, "hasValue", "format_has_value", (fmt,), T.BOOL, _format_has_value, member=True, env="run"),
        Fn(LIBRARY, "value", "format_value", (fmt,), FORMAT_TYPE, _format_value, member=True, env="run"),
        Fn(LIBRARY, "hasValue", "format_errors_has_value", (errs,), T.BOOL, _errors_has_value, member=True,
           env="run"),
        Fn(LIBRARY, "value", "format_errors_value", (errs,), T.List(T.STRING), _errors_value, member=True,
           env="run"),
    ]
    return fns
