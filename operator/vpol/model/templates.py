"""A GeneratingPolicy's ``template`` items: YAML documents, with ``(( ... ))`` CEL placeholders under
``interpolate: cel`` (pure; docs/generate-and-delete.md, Kyverno's pkg/cel/policies/gpol/template).

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
    for n, doc in enumerate(documents, start=1):
        if not isinstance(doc, dict):
            raise TemplateError(f"document {n} must be a mapping describing a resource")
    template = Template(documents)
    if not interpolate:
        return template
    cursor = 0
    for doc in documents:
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


def _go_scalar(value: Any) -> str:
    """A scalar as Go's ``%v`` writes it (the way Kyverno joins a placeholder into text)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        if math.isnan(value):
            return "NaN"
        if value == int(value) and abs(value) < 1e21:
            return str(int(value))
        text = repr(value)
        return text.replace("e+", "e+0") if "e+" in text and len(text.split("e+")[1]) == 1 else text
    return str(value)


def render(template: Template, evaluate: Callable[[Placeholder], Any]) -> list[dict[str, Any]]:
    """The template's objects, each placeholder replaced by ``evaluate(placeholder)``'s value (its exceptions are
    the caller's); a placeholder inside text whose value is not a scalar is a :class:`TemplateError`."""
    if not template.parts:
        return [dict(doc) for doc in _copy(template.documents)]

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        if isinstance(node, str) and node in template.parts:
            parts = template.parts[node]
            if len(parts) == 1 and isinstance(parts[0], Placeholder):
                return evaluate(parts[0])
            out: list[str] = []
            for part in parts:
                if isinstance(part, str):
                    out.append(part)
                    continue
                value = evaluate(part)
                if isinstance(value, (dict, list)):
                    raise TemplateError(f'placeholder "{part.expression}" embedded in a string must evaluate to a '
                                        f"scalar, got {type(value).__name__}; use a whole-value placeholder for "
                                        "structured results", part.offset)
                out.append(_go_scalar(value))
            return "".join(out)
        return node

    return [fill(doc) for doc in template.documents]


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value
