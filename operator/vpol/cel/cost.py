"""How much work evaluating an expression can take, bounded from the request before evaluating it.

vpol's admission webhook evaluates in bounded worker processes because cel-cpp
has no cost limit and cannot be interrupted (vpol.policies.sandbox). The serving
process may evaluate a request itself (no round trip to a worker) only when the
work is known to be small before it starts. This module decides, from the
checked syntax tree of every expression a policy evaluates, whether that work
can be bounded from the sizes of the lists and maps the expressions iterate,
and which ones they are; the server then measures those sizes on the request
(:meth:`WorkPlan.work`) and evaluates inline only under a budget.

What the bound rests on (measured on cel-expr-python 0.1.3):

* comprehensions run at most 10,000 iterations per evaluation (cel-cpp's
  iteration budget), and an iteration of a ``map``/``filter`` copies the list
  built so far (about 0.1 us per element: 5,000 elements take a second), so
  such a comprehension over ``n`` elements costs ``n * (n + 1) / 2`` element
  copies, one over ``n`` elements otherwise ``n`` iterations;
* outside comprehensions an expression does a fixed number of operations, each
  linear in the values it reads (the server bounds the request's size);
* inside a comprehension every operation must cost a constant, or be linear in
  the current element only (which sums to the size of the range): selecting,
  indexing, optional and logical operators, comparisons with at least one side
  that is constant or part of the element, and the linear string, list and
  conversion functions on parts of the element or constants. A comprehension
  nested in another must range over a part of the outer element (or a literal);
* the lists iterated are JSON locations of the request (``object.spec.containers``,
  each container's ``ports``: patterns with ``*`` for "every element"), literals, or
  ``+``/``filter``/``map``/``orValue``/``dyn`` of those, possibly through variables.

Anything else (another function: the I/O libraries, ``lists.range``, regular
expressions built from the input, string formatting; a comprehension that is not
a standard macro or ``cel.bind``; a range whose origin is unknown) has no plan:
such policies are evaluated by the workers, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from vpol.cel.aggregate_literals import _fields, _one, type_name

#: A JSON location: a root name then field names, "*" for every element of a list (every value of a map).
Pattern = tuple[str, ...]

#: Names the expressions read that are request data (their patterns are measured on the request).
ROOTS = frozenset({"object", "oldObject", "request", "namespaceObject", "params", "exceptions"})
#: Type identifiers (``type(x) == string``): constants.
TYPE_NAMES = frozenset({"bool", "int", "uint", "double", "string", "bytes", "list", "map", "null_type", "type",
                        "optional_type", "dyn", "google.protobuf.Timestamp", "google.protobuf.Duration"})
#: The accumulator of cel-cpp's macros (all, exists, exists_one, map, filter).
ACCUMULATOR = "@result"

CONST, INPUT = 0, -1

#: Functions whose cost does not depend on the size of their operands (in a comprehension: any operand).
_CONSTANT_COST = frozenset({
    "!_", "_&&_", "_||_", "@not_strictly_false", "_?_:_", "dyn", "type", "hasValue", "value", "orValue",
    "optional.none", "optional.of", "optional.ofNonZeroValue", "_?._", "-_", "_-_", "_*_", "_/_", "_%_",
})
#: Comparisons: linear in the smaller operand (sizes are compared first), so cheap in a comprehension when one
#: side is constant or part of the element, or both are scalars.
_COMPARISONS = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
#: Functions linear in their operands (in a comprehension: every operand constant or part of the element).
_LINEAR = frozenset({
    "size", "_+_", "@in", "contains", "startsWith", "endsWith", "join", "split", "lowerAscii", "upperAscii",
    "trim", "substring", "indexOf", "lastIndexOf", "charAt", "string", "int", "uint", "double", "bool", "bytes",
    "duration", "timestamp", "quote", "reverse",
})
#: Functions whose named argument must be a constant (its size multiplies the work): position -> why.
_CONSTANT_ARGUMENT = {"matches": 1, "replace": 2}
_SCALARS = frozenset({"bool", "int", "uint", "double", "null_type"})


class Unbounded(Exception):
    """The expression's work cannot be bounded from the request: why."""


@dataclass(frozen=True)
class Value:
    """What the analysis knows of a value: how large it can be, and for a list or map where it comes from.

    ``cls``: CONST (sized by the expression's literals), a comprehension's id (a part of that
    comprehension's current element), or INPUT (up to the request's size). ``at``: the JSON locations the
    value is one of (None: computed, unknown). ``count``: locations whose sizes add up to a bound on the
    value's length as a list or map (None: unknown), plus ``extra`` literal entries. ``elem``: what its
    elements are, for literals and computed lists."""

    cls: int
    at: frozenset[Pattern] | None = None
    count: frozenset[Pattern] | None = None
    extra: int = 0
    elem: "Value | None" = None
    #: For a key met while iterating a map: the locations of that map (``m[k]`` is then a part of its entry).
    key_of: frozenset[Pattern] | None = None
    #: Whether ``elem`` stands for distinct parts of a range's elements (a map or filter's result), whose sizes
    #: add up to the range's: iterating them is then like iterating located elements.
    parts: bool = False


_CONST = Value(CONST, frozenset(), frozenset())


def _join_cls(a: int, b: int) -> int:
    if a == b or b == CONST:
        return a
    if a == CONST:
        return b
    return INPUT


def _union(a: frozenset[Pattern] | None, b: frozenset[Pattern] | None) -> frozenset[Pattern] | None:
    return None if a is None or b is None else a | b


def _parts_or_constants(v: Value) -> bool:
    return v.parts or v.elem is None or v.elem.cls == CONST


def join(a: Value, b: Value) -> Value:
    """A value that is either ``a`` or ``b`` (a conditional, orValue)."""
    elem = None if a.elem is None or b.elem is None else join(a.elem, b.elem)
    return Value(_join_cls(a.cls, b.cls), _union(a.at, b.at), _union(a.count, b.count), max(a.extra, b.extra), elem,
                 a.key_of if a.key_of == b.key_of else None, _parts_or_constants(a) and _parts_or_constants(b))


def concat(a: Value, b: Value) -> Value:
    """``a + b`` of lists (for strings the same bound holds)."""
    elem = a.elem if b.elem is None else (b.elem if a.elem is None else join(a.elem, b.elem))
    return Value(_join_cls(a.cls, b.cls), _union(a.at, b.at), _union(a.count, b.count), a.extra + b.extra, elem,
                 parts=_parts_or_constants(a) and _parts_or_constants(b))


def _reclassed(v: Value, cls: int) -> Value:
    return v if v.cls == CONST else Value(cls, v.at, v.count, v.extra, v.elem, v.key_of, v.parts)


def element_of(v: Value, cls: int) -> Value:
    """An element of list ``v`` (a key of map ``v``) as comprehension ``cls`` iterates it: a part of what ``v``
    is, so the elements' sizes add up to ``v``'s (literal elements keep what they are)."""
    parts: list[Value] = []
    if v.at:
        at = frozenset(p + ("*",) for p in v.at)
        parts.append(Value(cls, at, at, key_of=v.at))
    if v.elem is not None:
        # parts of a range's elements are as large as the range is here; literal elements are what they are
        parts.append(_reclassed(v.elem, cls) if v.parts else v.elem)
    if not parts:
        return _CONST if v.at == frozenset() else Value(INPUT)
    out = parts[0]
    for part in parts[1:]:
        out = join(out, part)
    return out


@dataclass(frozen=True)
class Range:
    """A comprehension's range: its length is at most the sizes at ``count`` plus ``extra``; with
    ``accumulates`` each iteration copies the list built so far (map, filter)."""

    count: frozenset[Pattern]
    extra: int
    accumulates: bool
    #: How many times it runs per evaluation (the literal lists iterated around it).
    times: int = 1


@dataclass(frozen=True)
class WorkPlan:
    """The comprehensions of a set of expressions, to bound their work on a given request."""

    ranges: tuple[Range, ...] = ()
    #: Nodes of the expressions (each a linear operation at most, outside comprehensions).
    nodes: int = 0

    def __add__(self, other: "WorkPlan") -> "WorkPlan":
        return WorkPlan(self.ranges + other.ranges, self.nodes + other.nodes)

    def work(self, roots: Mapping[str, Any], sizes: dict[Pattern, int] | None = None) -> int:
        """Iterations plus element copies the comprehensions can take on ``roots`` (object, oldObject, ...);
        ``sizes``: the sizes measured so far on these roots (filled here: policies share their patterns)."""
        if sizes is None:
            sizes = {}
        total = 0
        for r in self.ranges:
            n = r.extra
            for p in r.count:
                known = sizes.get(p)
                if known is None:
                    known = sizes[p] = size(roots, p)
                n += known
            total += r.times * (n + (n * (n + 1) // 2 if r.accumulates else 0))
        return total


def merged(plans: Iterable[WorkPlan]) -> WorkPlan:
    """The sum of ``plans`` (their work on any request is the sum of theirs), with the ranges that count the same
    lists the same way made one, their ``times`` added: policies that iterate the same lists (every Pod Security
    policy: the Pod's containers) are measured once per request instead of once each."""
    times: dict[tuple[frozenset[Pattern], int, bool], int] = {}
    nodes = 0
    for p in plans:
        nodes += p.nodes
        for r in p.ranges:
            key = (r.count, r.extra, r.accumulates)
            times[key] = times.get(key, 0) + r.times
    return WorkPlan(tuple(Range(count, extra, accumulates, n) for (count, extra, accumulates), n in times.items()),
                    nodes)


def size(roots: Mapping[str, Any], pattern: Pattern) -> int:
    """The sum of the lengths of the lists, maps and strings at ``pattern`` in ``roots``."""
    values = [roots.get(pattern[0])]
    for step in pattern[1:]:
        nxt: list[Any] = []
        for v in values:
            if step == "*":
                if isinstance(v, list):
                    nxt.extend(v)
                elif isinstance(v, dict):
                    nxt.extend(v.values())
            elif isinstance(v, dict) and step in v:
                nxt.append(v[step])
        values = nxt
        if not values:
            return 0
    return sum(len(v) for v in values if isinstance(v, (list, dict, str)))


@dataclass
class _Scope:
    #: The innermost comprehension whose range has a size (0: none, at the top level).
    loop: int = 0
    names: dict[str, Value] = field(default_factory=dict)
    #: How many times this part runs per evaluation of the innermost counted comprehension (or of the
    #: expression): the product of the sizes of the literal lists iterated in between.
    times: int = 1

    def inside(self, loop: int, names: Mapping[str, Value], times: int | None = None) -> "_Scope":
        return _Scope(loop, {**self.names, **names}, self.times if times is None else times)

    def cheap(self, v: Value) -> bool:
        """Whether an operation linear in ``v`` costs a constant per iteration here (summed: the range's size)."""
        return self.loop == 0 or v.cls in (CONST, self.loop)


class _Analysis:
    def __init__(self, variables: Mapping[str, Value], types: dict[int, bytes]):
        self.variables = variables
        self.types = types
        self.ranges: list[Range] = []
        self.nodes = 0
        self._next_loop = 0
        #: Per comprehension being walked: what its step appends to the accumulator (map, filter).
        self._appends: list[Value | None] = []

    # -- helpers

    def _type(self, node: dict[int, list[Any]]) -> str:
        raw = self.types.get((node.get(2) or [0])[0])
        return type_name(raw) if isinstance(raw, bytes) else "dyn"

    def _scalar(self, node: dict[int, list[Any]]) -> bool:
        return self._type(node) in _SCALARS

    # -- the walk

    def visit(self, raw: bytes, scope: _Scope) -> Value:
        self.nodes += 1
        node = _fields(raw)
        if 3 in node:  # constant
            return _CONST
        if 4 in node:  # identifier
            return self._ident(_one(_fields(_one(node, 4)), 1).decode(), scope)
        if 5 in node:  # select (or has())
            sel = _fields(_one(node, 5))
            operand_raw, name = _one(sel, 1), _one(sel, 2).decode()
            operand = _fields(operand_raw)
            if 4 in operand and _one(_fields(_one(operand, 4)), 1).decode() == "variables" \
                    and "variables" not in scope.names:
                self.nodes += 1
                if name not in self.variables:
                    raise Unbounded(f"variables.{name} is not known")
                return _CONST if (sel.get(3) or [0])[0] else self.variables[name]
            value = self.visit(operand_raw, scope)
            if (sel.get(3) or [0])[0]:  # has(): a constant-cost test
                return _CONST
            return self._select(value, name)
        if 6 in node:
            return self._call(node, scope)
        if 7 in node:  # list literal
            elems = [self.visit(e, scope) for e in _fields(_one(node, 7)).get(1) or [] if isinstance(e, bytes)]
            elem = None
            for e in elems:
                elem = e if elem is None else join(elem, e)
            cls = CONST if elem is None else elem.cls
            return Value(cls, frozenset(), frozenset(), len(elems), elem or _CONST)
        if 8 in node:  # map or message literal
            struct = _fields(_one(node, 8))
            entries = [_fields(e) for e in struct.get(2) or [] if isinstance(e, bytes)]
            # Its keys when iterated, its values when indexed: the element stands for both.
            parts = [self.visit(_one(e, n), scope) for e in entries for n in (3, 4) if n in e]
            elem = None
            for part in parts:
                elem = part if elem is None else join(elem, part)
            return Value(CONST if elem is None else elem.cls, frozenset(), frozenset(), len(entries), elem)
        if 9 in node:
            return self._comprehension(_fields(_one(node, 9)), scope)
        raise Unbounded("an expression of an unknown kind")

    def _ident(self, name: str, scope: _Scope) -> Value:
        if name in scope.names:
            return scope.names[name]
        if name in ROOTS:
            return Value(CONST if name == "exceptions" else INPUT, frozenset({(name,)}), frozenset({(name,)}))
        if name in TYPE_NAMES:
            return _CONST
        raise Unbounded(f"'{name}' (a library or an unknown name)")

    @staticmethod
    def _select(value: Value, name: str) -> Value:
        at = None if value.at is None else frozenset(p + (name,) for p in value.at)
        return Value(value.cls, at, at)

    def _call(self, node: dict[int, list[Any]], scope: _Scope) -> Value:
        call = _fields(_one(node, 6))
        fn = _one(call, 2).decode()
        arg_nodes = ([_one(call, 1)] if 1 in call else []) + \
            [a for a in call.get(3) or [] if isinstance(a, bytes)]
        if fn == "_+_" and len(arg_nodes) == 2 and self._is_accumulator(arg_nodes[0], scope):
            # map/filter appending to their accumulator (``@result + [t]``): the copy is counted with the range;
            # t must be constant or part of the element, so what is built stays as large as the range.
            literal = self.visit(arg_nodes[1], scope)
            appended = literal.elem if literal.elem is not None else Value(literal.cls)
            if not scope.cheap(appended):
                raise Unbounded("a map producing values larger than its elements")
            self._appends[-1] = appended if self._appends[-1] is None else join(self._appends[-1], appended)
            return scope.names[ACCUMULATOR]
        args = [self.visit(a, scope) for a in arg_nodes]
        if fn in ("_?._",):
            field_node = _fields(arg_nodes[1])
            name = _one(_fields(_one(field_node, 3)), 6).decode() if 3 in field_node else ""  # string_value
            return self._select(args[0], name) if name else Value(args[0].cls)
        if fn in ("_[_]", "_[?_]"):
            target, key = args
            if scope.loop and not (scope.cheap(key) or self._scalar(_fields(arg_nodes[1]))):
                raise Unbounded(f"indexing with a large key inside a comprehension ({fn})")
            if scope.loop and key.cls == scope.loop and target.at and key.key_of == target.at:
                # m[k] for a key k of m met in this comprehension: a part of the current element's entry.
                return Value(scope.loop, frozenset(p + ("*",) for p in target.at))
            return element_of(target, target.cls)
        if fn in ("orValue", "_?_:_"):
            branches = args[1:] if fn == "_?_:_" else args
            out = branches[0]
            for b in branches[1:]:
                out = join(out, b)
            return out
        if fn in ("dyn", "optional.of", "optional.ofNonZeroValue", "value"):
            return args[0] if args else _CONST
        if fn in _CONSTANT_COST:
            return _CONST
        if fn in _COMPARISONS:
            if scope.loop and not (any(scope.cheap(a) for a in args)
                                   or all(self._scalar(_fields(n)) for n in arg_nodes)):
                raise Unbounded(f"a comparison of two large values inside a comprehension ({fn})")
            return _CONST
        if fn in _LINEAR or fn in _CONSTANT_ARGUMENT:
            position = _CONSTANT_ARGUMENT.get(fn)
            if position is not None and (len(args) <= position or args[position].cls != CONST
                                         or args[position].at):
                raise Unbounded(f"{fn} with an argument computed from the request")
            if fn == "@in" and scope.loop and args[1].cls == CONST and args[1].at == frozenset():
                # x in a literal of constants: as many comparisons as the literal has, each bounded by it.
                return _CONST
            if scope.loop:
                for a, n in zip(args, arg_nodes):
                    if not (scope.cheap(a) or self._scalar(_fields(n)) or
                            (fn == "size" and self._type(_fields(n)).startswith(("list", "map")))):
                        raise Unbounded(f"{fn} of a large value inside a comprehension")
            if fn == "_+_" and len(args) == 2:
                return concat(args[0], args[1])
            if fn in ("size", "@in", "contains", "startsWith", "endsWith", "indexOf", "lastIndexOf", "int",
                      "uint", "double", "bool", "matches"):
                return _CONST
            cls = CONST
            for a in args:
                cls = _join_cls(cls, a.cls)
            return Value(cls)
        raise Unbounded(f"function {fn}")

    def _is_accumulator(self, raw: bytes, scope: _Scope) -> bool:
        node = _fields(raw)
        return 4 in node and _one(_fields(_one(node, 4)), 1).decode() == ACCUMULATOR and ACCUMULATOR in scope.names

    def _comprehension(self, comp: dict[int, list[Any]], scope: _Scope) -> Value:
        iter_var, accu_var = _one(comp, 1).decode(), _one(comp, 3).decode()
        if 8 in comp:
            raise Unbounded("a two-variable comprehension")
        rng = self.visit(_one(comp, 2), scope)
        if accu_var != ACCUMULATOR:
            # cel.bind(name, init, body): an empty range, the value bound once.
            if rng.count != frozenset() or rng.extra != 0:
                raise Unbounded("a comprehension that is neither a macro nor cel.bind")
            bound = self.visit(_one(comp, 4), scope)
            return self.visit(_one(comp, 7), scope.inside(scope.loop, {accu_var: bound}))
        init = self.visit(_one(comp, 4), scope)
        # map and filter start from [] and append; all, exists and exists_one keep a bool or a count.
        accumulates = init.count == frozenset() and init.extra == 0 and init.elem is not None
        literal = rng.count == frozenset()
        if literal:
            # A literal's elements: a fixed number of iterations, each costed as at this level.
            loop = scope.loop
            times = scope.times * max(1, rng.extra)
            element = rng.elem if rng.elem is not None else Value(rng.cls)
        else:
            if rng.count is None:
                raise Unbounded("a comprehension over a list of unknown origin")
            if scope.loop and rng.cls not in (scope.loop, CONST):
                raise Unbounded("a comprehension inside another one, over more than a part of its element")
            self._next_loop += 1
            loop = self._next_loop
            times = scope.times  # the ranges inside are measured over every element of this one
            self.ranges.append(Range(rng.count, rng.extra, accumulates, scope.times))
            element = element_of(rng, loop)
        inner = scope.inside(loop, {iter_var: element, ACCUMULATOR: Value(loop)}, times)
        self._appends.append(None)
        self.visit(_one(comp, 5), inner)
        self.visit(_one(comp, 6), inner)
        appended = self._appends.pop()
        result = _CONST
        if accumulates:
            elem = appended or _CONST
            if not literal:  # a part of the element is a part of the range, as large as the range is here
                elem = _reclassed(elem, rng.cls if elem.cls == loop else INPUT)
            result = Value(elem.cls if literal else rng.cls, None, rng.count, rng.extra, elem, parts=not literal)
        return self.visit(_one(comp, 7), scope.inside(scope.loop, {ACCUMULATOR: result}))


def _tree(expression: cel.Expression) -> tuple[bytes, dict[int, bytes]]:
    wrapped = _fields(expression.serialize())
    inner = _fields(_one(wrapped, 2))
    if _one(wrapped, 1).endswith(b"CheckedExpr"):
        types = {}
        for entry in inner.get(3) or []:
            if isinstance(entry, bytes):
                f = _fields(entry)
                key, value = (f.get(1) or [0])[0], (f.get(2) or [b""])[0]
                if isinstance(key, int) and isinstance(value, bytes):
                    types[key] = value
        return _one(inner, 4), types
    return _one(inner, 2), {}  # ParsedExpr (built without type checking): no types


def analyze(expression: cel.Expression, variables: Mapping[str, Value] | None = None) -> tuple[Value, WorkPlan]:
    """The value of ``expression`` as the analysis sees it and its WorkPlan; raises Unbounded."""
    root, types = _tree(expression)
    analysis = _Analysis(variables or {}, types)
    value = analysis.visit(root, _Scope())
    return value, WorkPlan(tuple(analysis.ranges), analysis.nodes)


def plan(expressions: Iterable[cel.Expression], variables: Sequence[tuple[str, cel.Expression]] = ()
         ) -> WorkPlan | None:
    """The WorkPlan of a set of expressions reading ``variables`` (name and expression, in declaration order:
    each is computed once); None when some expression's work cannot be bounded from the request."""
    try:
        total = WorkPlan()
        known: dict[str, Value] = {}
        for name, expression in variables:
            value, work = analyze(expression, known)
            known[name] = value
            total = total + work
        for expression in expressions:
            total = total + analyze(expression, known)[1]
        return total
    except Unbounded:
        return None


def reason(expressions: Iterable[cel.Expression], variables: Sequence[tuple[str, cel.Expression]] = ()) -> str:
    """Why :func:`plan` has no plan for these expressions ("" when it has one): for diagnostics and tests."""
    try:
        known: dict[str, Value] = {}
        for name, expression in variables:
            known[name] = analyze(expression, known)[0]
        for expression in expressions:
            analyze(expression, known)
    except Unbounded as exc:
        return str(exc)
    return ""
