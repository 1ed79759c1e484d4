"""A GeneratingPolicy's ``template`` items: YAML documents, with ``(( ... ))`` CEL placeholders under
``interpolate: cel`` (pure; docs/internals/generating-and-deleting.md, Kyverno's pkg/cel/policies/gpol/template).

As in Kyverno, the YAML is parsed first (every document; empty and null ones skipped; each must be a mapping),
then placeholders are evaluated inside string values, never in mapping keys:

- a value that is exactly one placeholder becomes the expression's value itself, whatever its type (a map, a
  list, a number...), quoted in the YAML or not;
- a value mixing text and placeholders stays a string, each placeholder replaced by its value written as Go's
  ``%v`` writes a scalar (a map or a list there is an error);
- ``\\((`` writes a literal ``((``.

A placeholder runs from ``((`` to the matching ``))``: parentheses are counted and CEL string literals skipped,
so ``(( f(x) ))`` and ``(( '))' ))`` are single placeholders. Under ``interpolate: none`` the template is plain
YAML and ``((`` is text.
"""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

OPEN, CLOSE, ESCAPE = "((", "))", "\\(("


class TemplateError(ValueError):
    """A template that cannot be used; ``offset`` points into the template's text when known."""

    def __init__(self, message: str, offset: int | None = None):
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Placeholder:
    """One placeholder: its expression, and where it starts in the template's text."""

    expression: str
    offset: int


@dataclass
class Template:
    """A parsed template: its documents, and every placeholder they hold (by the string values holding them)."""

    documents: list[Any]
    placeholders: list[Placeholder] = field(default_factory=list)
    #: Per string value with placeholders (by its text): its parts (text, or a Placeholder), in order.
    parts: dict[str, list[str | Placeholder]] = field(default_factory=dict)


def _placeholders_in(text: str, base: int) -> list[str | Placeholder]:
    """The parts of one string value: text and placeholders (``base``: the value's offset in the template, for
    positions; the value's own text is searched)."""
    parts: list[str | Placeholder] = []
    plain: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith(ESCAPE, i):
            plain.append(OPEN)
            i += len(ESCAPE)
            continue
        if not text.startswith(OPEN, i):
            plain.append(text[i])
            i += 1
            continue
        start = i
        i += len(OPEN)
        depth = 0
        quote = ""
        while True:
            if i >= len(text):
                if quote:
                    raise TemplateError(f"unterminated string literal in placeholder starting at offset {base + start}",
                                        base + start)
                raise TemplateError(f"unterminated placeholder starting at offset {base + start}: missing closing "
                                    f"'{CLOSE}'", base + start)
            c = text[i]
            if quote:
                if c == "\\":
                    i += 2
                    continue
                if c == quote:
                    quote = ""
                i += 1
                continue
            if c in "'\"":
                quote = c
            elif c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    if text.startswith(CLOSE, i):
                        break
                    raise TemplateError(f"unbalanced parenthesis in placeholder starting at offset {base + start}",
                                        base + start)
                depth -= 1
            i += 1
        expression = text[start + len(OPEN):i].strip()
        if not expression:
            raise TemplateError(f"empty placeholder at offset {base + start}", base + start)
        if plain:
            parts.append("".join(plain))
            plain = []
        parts.append(Placeholder(expression, base + start))
        i += len(CLOSE)
    if plain:
        parts.append("".join(plain))
    return parts


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any, str]]:
    """Every (path, container, key) of a string value, and mapping keys as (path, None, key)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                yield (*path, key), None, key
            if isinstance(value, str):
                yield (*path, key), node, key
            else:
                yield from _strings(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            if isinstance(value, str):
                yield (*path, index), node, str(index)
            else:
                yield from _strings(value, (*path, index))


def parse(text: str, interpolate: bool) -> Template:
    """The template's documents and placeholders, or :class:`TemplateError`."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TemplateError(f"failed to parse YAML: {exc}".replace("\n", " "),
                            mark.index if mark is not None else None) from None
    if not documents:
        raise TemplateError("template must contain at least one YAML document")
    template = Template(documents)
    for n, doc in enumerate(documents, start=1):
        if isinstance(doc, dict):
            continue
        whole = _placeholders_in(doc, max(text.find(doc), 0)) if interpolate and isinstance(doc, str) else []
        if len(whole) == 1 and isinstance(whole[0], Placeholder):
            # A document that is one placeholder: its value is the object (checked when rendered).
            template.parts[doc] = whole
            template.placeholders.append(whole[0])
            continue
        raise TemplateError(f"document {n} must be a mapping describing a resource")
    if not interpolate:
        return template
    cursor = 0
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        for _path, container, key in _strings(doc):
            value = key if container is None else (container[int(key)] if isinstance(container, list)
                                                    else container[key])
            if OPEN not in value and ESCAPE not in value:
                continue
            at = text.find(value, cursor) if value else -1
            if at < 0:
                at = text.find(value)
            base = max(at, 0)
            if container is None:
                if OPEN in value.replace(ESCAPE, ""):
                    raise TemplateError("placeholders are not supported in mapping keys", base)
                continue
            parts = _placeholders_in(value, base)
            if at >= 0:
                cursor = at + len(value)
            if value not in template.parts:
                template.parts[value] = parts
                template.placeholders.extend(p for p in parts if isinstance(p, Placeholder))
    return template


def _go_float(value: float) -> str:
    """A float64 as Go's ``%v`` writes it: the shortest digits that read back as the value, with an exponent when it
    is below -4 or from 6 on (``1e+06``, ``1.234567e+06``, ``1e-05``), else plainly (``123456``, ``0.0001``)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digit_tuple, exponent = decimal.Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple))
    stripped = digits.rstrip("0") or "0"
    exponent += len(digits) - len(stripped)
    digits, negative = stripped, "-" if sign else ""
    point = len(digits) + exponent  # the value is 0.<digits> x 10**point
    scientific = point - 1
    if scientific < -4 or scientific >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{negative}{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"
    if point <= 0:
        return f"{negative}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{negative}{digits}{'0' * (point - len(digits))}"
    return f"{negative}{digits[:point]}.{digits[point:]}"


def _go_scalar(value: Any) -> str | None:
    """A scalar as Go's ``%v`` writes it (the way Kyverno joins a placeholder into text); None for what Kyverno
    does not join (null, maps, lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, (int, str)):
        return str(value)
    return None


#: Go's %T of what a placeholder inside text may not be (Kyverno's message names the value's Go type).
_GO_TYPES = {dict: "map[string]interface {}", list: "[]interface {}", type(None): "<nil>"}


def render(template: Template, evaluate: Callable[[Placeholder], Any]) -> list[dict[str, Any]]:
    """The template's objects, each placeholder replaced by ``evaluate(placeholder)``'s value. A placeholder that
    fails to evaluate, or one inside text whose value is not a scalar, is a :class:`TemplateError` worded as
    Kyverno's (``document 1: field "metadata": field "name": failed to evaluate placeholder "x": ...``)."""
    if not template.parts:
        return [dict(doc) for doc in _copy(template.documents)]

    def value_of(part: Placeholder) -> Any:
        try:
            return evaluate(part)
        except TemplateError:
            raise
        except Exception as exc:  # noqa: BLE001 - the evaluation's error, located
            raise TemplateError(f'failed to evaluate placeholder "{part.expression}": {exc}', part.offset) from None

    def located(prefix: str, fill_one: Callable[[], Any]) -> Any:
        try:
            return fill_one()
        except TemplateError as exc:
            raise TemplateError(f"{prefix}: {exc}", exc.offset) from None

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: located(f'field "{k}"', functools.partial(fill, v)) for k, v in node.items()}
        if isinstance(node, list):
            return [located(f"item {i}", functools.partial(fill, v)) for i, v in enumerate(node)]
        if isinstance(node, str) and node in template.parts:
            parts = template.parts[node]
            if len(parts) == 1 and isinstance(parts[0], Placeholder):
                return value_of(parts[0])
            out: list[str] = []
            for part in parts:
                if isinstance(part, str):
                    out.append(part)
                    continue
                value = value_of(part)
                text = _go_scalar(value)
                if text is None:
                    got = _GO_TYPES.get(type(value), type(value).__name__)
                    raise TemplateError(f'placeholder "{part.expression}" embedded in a string must evaluate to a '
                                        f"scalar, got {got}; use a whole-value placeholder for structured results",
                                        part.offset)
                out.append(text)
            return "".join(out)
        return node

    out = [located(f"document {n}", functools.partial(fill, doc)) for n, doc in enumerate(template.documents, start=1)]
    for n, obj in enumerate(out, start=1):
        if not isinstance(obj, dict):
            raise TemplateError(f"document {n}: expected a mapping describing a resource, got "
                                f"{_GO_TYPES.get(type(obj), type(obj).__name__)}")
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
