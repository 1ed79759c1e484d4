"""Kubernetes name and label validations, with apimachinery's exact messages.

Reproduces, from k8s.io/apimachinery 0.37 (``pkg/util/validation``,
``pkg/api/validate/content``, ``pkg/api/validation``): ``IsDNS1123Label``,
``IsDNS1123Subdomain``, ``IsDNS1035Label``, ``IsQualifiedName`` (label
keys), ``IsValidLabelValue`` and the ``NameIsDNS...`` variants whose
``prefix`` form masks a trailing dash (exactly as Kubernetes does: the last
*two* characters become ``a``). Lengths are in bytes, like Go's ``len``.
Each returns the list of error messages, empty when the value is valid.

The patterns are the apimachinery ones; they only use ASCII classes and
anchors, so Python's ``re`` with ``fullmatch`` and ASCII matching gives the
same answers as Go's RE2 here (and they cannot backtrack catastrophically).
"""

from __future__ import annotations

import re

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MAX = 253
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
DNS1035_LABEL_ERR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
DNS1035_LABEL_MAX = 63
LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_KEY_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
LABEL_KEY_MAX = 63
LABEL_VALUE_FMT = "(" + LABEL_KEY_FMT + ")?"
LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
LABEL_VALUE_MAX = 63

_DNS1123_LABEL = re.compile(DNS1123_LABEL_FMT, re.ASCII)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT, re.ASCII)
_DNS1035_LABEL = re.compile(DNS1035_LABEL_FMT, re.ASCII)
_LABEL_KEY = re.compile(LABEL_KEY_FMT, re.ASCII)
_LABEL_VALUE = re.compile(LABEL_VALUE_FMT, re.ASCII)


def _matches(pattern: re.Pattern[str], value: str) -> bool:
    # Go's "^...$" anchors: "$" does not match before a trailing newline.
    return pattern.fullmatch(value) is not None


def _byte_len(value: str) -> int:
    return len(value.encode("utf-8"))


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len_error(length: int, unit: str = "characters") -> str:
    return f"must be no more than {length} {unit}"


def is_dns1123_label(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _matches(_DNS1123_LABEL, value):
        if _matches(_DNS1123_SUBDOMAIN, value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def _is_dns1123_subdomain(value: str, unit: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX, unit))
    if not _matches(_DNS1123_SUBDOMAIN, value):
        errs.append(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    return _is_dns1123_subdomain(value, "characters")


def is_dns1035_label(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > DNS1035_LABEL_MAX:
        errs.append(max_len_error(DNS1035_LABEL_MAX))
    if not _matches(_DNS1035_LABEL, value):
        errs.append(regex_error(DNS1035_LABEL_ERR, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """``content.IsLabelKey`` (the "qualified name" format)."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in _is_dns1123_subdomain(prefix, "bytes"))
    else:
        return [
            "a valid label key "
            + regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _byte_len(name) > LABEL_KEY_MAX:
        errs.append("name part " + max_len_error(LABEL_KEY_MAX, "bytes"))
    if not _matches(_LABEL_KEY, name):
        errs.append("name part " + regex_error(LABEL_KEY_ERR, LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs


def is_label_value(value: str) -> list[str]:
    errs: list[str] = []
    if _byte_len(value) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX, "bytes"))
    if not _matches(_LABEL_VALUE, value):
        errs.append(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def mask_trailing_dash(name: str) -> str:
    """apimachinery's ``maskTrailingDash`` (it replaces the last two bytes by "a")."""
    raw = name.encode("utf-8")
    if len(raw) > 1 and raw.endswith(b"-"):
        return (raw[:-2] + b"a").decode("utf-8", "replace")
    return name
