"""cel-go's compile-time check of ``'...'.format([...])``, which the API server and Kyverno run.

cel-go's strings extension validates every ``format`` call whose template is a string literal and whose
argument is a list literal: the template must parse, each clause must have an element, the element's
checked type must suit the clause (``dyn`` suits every clause; ``%s`` also looks inside list and map
literals), and there must be no more elements than clauses. cel-cpp has no such check, so vpol runs it
on the checked expression (read as vpol.cel.aggregate_literals reads it), with cel-go's messages:
``error during formatting: decimal clause can only be used on integers, was given double``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vpol.cel.aggregate_literals import CheckedTree, _Fields, _fields, _one, type_name
from vpol.cel.libraries.kyverno.format_lib import FormatError, template_parts

#: Kinds (cel-go's Type.Kind, by vpol's type names) each clause accepts; ``dyn`` is accepted by all.
_ACCEPTS = {
    "s": {"list", "map", "int", "uint", "double", "bool", "string", "timestamp", "bytes", "duration", "type",
          "null_type"},
    "d": {"int", "uint"},
    "f": {"double", "string"},
    "e": {"double", "string"},
    "b": {"int", "uint", "bool"},
    "x": {"int", "uint", "string", "bytes"},
    "X": {"int", "uint", "string", "bytes"},
    "o": {"int", "uint"},
}
_MESSAGES = {
    "s": "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, "
         "and timestamps, was given {}",
    "d": "decimal clause can only be used on integers, was given {}",
    "f": "fixed-point clause can only be used on doubles, was given {}",
    "e": "scientific clause can only be used on doubles, was given {}",
    "b": "only integers and bools can be formatted as binary, was given {}",
    "x": "only integers, byte buffers, and strings can be formatted as hex, was given {}",
    "X": "only integers, byte buffers, and strings can be formatted as hex, was given {}",
    "o": "octal clause can only be used on integers, was given {}",
}
#: What cel-go's Type.TypeName() says of vpol's type names that differ.
_GO_NAMES = {"timestamp": "google.protobuf.Timestamp", "duration": "google.protobuf.Duration"}


@dataclass(frozen=True)
class FormatProblem:
    #: Code point offset in the source as compiled.
    offset: int
    message: str


def _kind(name: str) -> str:
    return name.split("(", 1)[0]


def format_problems(tree: CheckedTree) -> list[FormatProblem]:
    """The ``format`` calls of a checked expression that cel-go's checker refuses, where and why."""

    def kind_of(node: _Fields) -> str:
        raw = tree.type_of(node)
        return _kind(type_name(raw)) if raw else "dyn"

    def unsuitable_for_string(node: _Fields) -> _Fields | None:
        """The node (this one, or one inside a list or map literal) %s cannot write, if any."""
        kind = kind_of(node)
        if kind != "dyn" and kind not in _ACCEPTS["s"]:
            return node
        inside: list[_Fields] = []
        if 7 in node:
            inside = [_fields(e) for e in _fields(_one(node, 7)).get(1) or [] if isinstance(e, bytes)]
        elif 8 in node and not _one(_fields(_one(node, 8)), 1):
            for entry in _fields(_one(node, 8)).get(2) or []:
                if isinstance(entry, bytes):
                    e = _fields(entry)
                    inside += [_fields(_one(e, 3)), _fields(_one(e, 4))]
        for sub in inside:
            bad = unsuitable_for_string(sub)
            if bad is not None:
                return bad
        return None

    def check(call_node: _Fields, template: str, elements: list[_Fields]) -> FormatProblem | None:
        at_call = tree.offset(call_node)
        requested = 0
        try:
            for part in template_parts(template, len(elements), checking=True):
                if isinstance(part, str):
                    continue
                requested += 1
                element = elements[part.argument]
                bad: _Fields | None
                if part.verb == "s":
                    bad = unsuitable_for_string(element)
                else:
                    kind = kind_of(element)
                    bad = None if kind == "dyn" or kind in _ACCEPTS[part.verb] else element
                if bad is not None:
                    name = _kind(type_name(tree.type_of(bad)))
                    return FormatProblem(tree.offset(bad, at_call), "error during formatting: " +
                                         _MESSAGES[part.verb].format(_GO_NAMES.get(name, name)))
        except FormatError as exc:
            return FormatProblem(at_call, str(exc))
        if len(elements) > requested:
            return FormatProblem(at_call, f"too many arguments supplied to string.format (expected {requested}, "
                                          f"got {len(elements)})")
        return None

    found: list[FormatProblem] = []
    for expr in tree.nodes():
        if 6 not in expr:
            continue
        call = _fields(_one(expr, 6))
        args = [a for a in call.get(3) or [] if isinstance(a, bytes)]
        if _one(call, 2).decode() != "format" or 1 not in call or len(args) != 1:
            continue
        target, argument = _fields(_one(call, 1)), _fields(args[0])
        constant = _fields(_one(target, 3)) if 3 in target else {}
        if 6 not in constant or 7 not in argument:  # a string literal template, a list literal argument
            continue
        template = _one(constant, 6).decode("utf-8", "replace")
        elements = [_fields(e) for e in _fields(_one(argument, 7)).get(1) or [] if isinstance(e, bytes)]
        problem = check(expr, template, elements)
        if problem is not None:
            found.append(problem)
    return sorted(found, key=lambda p: p.offset)
