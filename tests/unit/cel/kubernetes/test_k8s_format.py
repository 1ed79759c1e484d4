"""Kubernetes format library: named formats, validate() messages, optional emulation."""

from __future__ import annotations

import pytest

from tests.unit.cel.kubernetes.conftest import compile_error, error, value

LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS1035_ERR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
KEY_ERR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def errors(fmt: str, text: str) -> list[str]:
    """``validate`` errors, [] when valid (through the optional's hasValue/value)."""
    result = f"format.{fmt}().validate(object)"
    return value(f"{result}.hasValue() ? {result}.value() : []", object=text)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("fmt", "text", "expected"),
    [
        # godoc examples of format.go: all valid
        ("dns1123Label", "my-label-name", []),
        ("dns1123Subdomain", "apiextensions.k8s.io", []),
        ("dns1035Label", "my-label-name", []),
        ("qualifiedName", "apiextensions.k8s.io/v1beta1", []),
        ("dns1123LabelPrefix", "my-label-prefix-", []),
        ("dns1123SubdomainPrefix", "mysubdomain.prefix.-", []),
        ("dns1035LabelPrefix", "my-label-prefix-", []),
        ("uri", "http://example.com", []),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", []),
        ("byte", "aGVsbG8=", []),
        ("date", "2021-01-01", []),
        ("datetime", "2021-01-01T00:00:00Z", []),
        # apimachinery messages
        ("dns1123Label", "My_Name", [LABEL_ERR]),
        ("dns1123Label", "a.b", ["must not contain dots"]),
        ("dns1123Label", "", [LABEL_ERR]),
        ("dns1123Label", "x" * 64, ["must be no more than 63 characters"]),
        ("dns1123Label", "a-", [LABEL_ERR]),
        ("dns1123Subdomain", "a" * 254, ["must be no more than 253 characters"]),
        ("dns1123Subdomain", "-a", [SUBDOMAIN_ERR]),
        ("dns1035Label", "123-abc", [DNS1035_ERR]),
        ("qualifiedName", "example.com/MyName", []),
        ("qualifiedName", "Foo.Bar_baz", []),
        ("qualifiedName", "/a", ["prefix part must be non-empty"]),
        ("qualifiedName", "a/", ["name part must be non-empty", KEY_ERR]),
        ("qualifiedName", "x" * 64, ["name part must be no more than 63 bytes"]),
        ("qualifiedName", "-a", [KEY_ERR]),
        ("labelValue", "", []),
        ("labelValue", "Foo.Bar_baz", []),
        ("labelValue", "-", [VALUE_ERR]),
        ("labelValue", "x" * 64, ["must be no more than 63 bytes"]),
        ("labelValue", "-" * 64, ["must be no more than 63 bytes", VALUE_ERR]),
        # Kubernetes masks a trailing dash by replacing the last *two* characters with "a"
        ("dns1123LabelPrefix", "ab-", []),
        ("dns1123LabelPrefix", "a.-", []),
        ("dns1123LabelPrefix", "a..-", ["must not contain dots"]),
        ("dns1123LabelPrefix", "-", [LABEL_ERR]),
        ("uri", "example.com", ['parse "example.com": invalid URI for request']),
        ("uri", "/path", []),
        ("uuid", "123E4567E89B12D3A456426614174000", []),
        ("uuid", "123e4567-e89b-12d3-a456-42661417400", ["does not match the UUID format"]),
        ("byte", "aGVsbG8", ["invalid base64"]),
        ("byte", "", ["invalid base64"]),
        ("date", "2021-02-29", ["invalid date"]),
        ("date", "2020-02-29", []),
        ("date", "2021-13-01", ["invalid date"]),
        ("date", "2021-1-1", ["invalid date"]),
        ("date", "0000-01-01", []),
        ("date", "-001-01-01", ["invalid date"]),
        ("datetime", "2021-01-01t23:59:59.123+02:00", []),
        ("datetime", "2021-01-01T24:00:00Z", ["invalid datetime"]),
        ("datetime", "2021-01-01 00:00:00Z", ["invalid datetime"]),
        ("datetime", "2021-01-01T00:00:00", ["invalid datetime"]),
    ],
)
def test_validate(fmt: str, text: str, expected: list[str]) -> None:
    assert errors(fmt, text) == expected


def test_validate_used_as_kubernetes_documents() -> None:
    # rule / messageExpression pairs from the format.go godoc
    assert value("format.dns1123Label().validate(object.metadata.name).hasValue()",
                 object={"metadata": {"name": "Bad_Name"}}) is True
    assert value("!format.dns1123Label().validate(object.metadata.name).hasValue()",
                 object={"metadata": {"name": "good-name"}}) is True
    assert value("format.dns1123Label().validate('a.b').value().join('\\n')") == "must not contain dots"
    assert error("format.dns1123Label().validate('good').value()") == "optional.none() dereference"


def test_named() -> None:
    assert value("format.named('dns1123Label').hasValue()") is True
    assert value("format.named('nope').hasValue()") is False
    assert value("format.named('dns1123Label').value().validate('a.b').value()") == ["must not contain dots"]
    assert value("format.named('dns1123Label').value() == format.dns1123Label()") is True
    assert value("format.dns1123Label() == format.dns1035Label()") is False
    # cel-cpp evaluates orValue only on real optionals: not declared for these
    assert "orValue" in compile_error("format.named('nope').orValue(format.uuid())")
    assert "orValue" in compile_error("format.uuid().validate('x').orValue([])")
    assert error("format.named('nope').value()") == "optional.none() dereference"
    assert value("type(format.uuid()) == kubernetes.NamedFormat") is True


@pytest.mark.parametrize(
    "name",
    ["dns1123Label", "dns1123Subdomain", "dns1035Label", "qualifiedName", "dns1123LabelPrefix",
     "dns1123SubdomainPrefix", "dns1035LabelPrefix", "labelValue", "uri", "uuid", "byte", "date", "datetime"],
)
def test_every_named_format_exists(name: str) -> None:
    assert value(f"format.named('{name}').value() == format.{name}()") is True
