"""Declaration building: one FunctionDecl per name, runtime dispatch, no exceptions out of eval."""

from __future__ import annotations

import pytest
from cel_expr_python import cel

from vpol.cel import types
from vpol.cel.environment import environment
from vpol.cel.libraries import all_libraries
from vpol.cel.libraries.kyverno import LIBRARIES
from vpol.cel.libraries.kyverno.declarations import INT, STRING, Fn, build, message

T = cel.Type
A_TYPE, A = types.opaque_type("vpol.kyverno.test.ReceiverA", {"n": "string"})
B_TYPE, B = types.opaque_type("vpol.kyverno.test.ReceiverB", {"n": "string"})


def _env(fns: list[Fn]) -> cel.Env:
    decls = [d for lib in build(fns).by_library.values() for d in lib]
    return cel.NewEnv(descriptor_pool=types.POOL, variables={"a": A_TYPE, "b": B_TYPE}, functions=decls)


def _eval(env: cel.Env, expr: str) -> cel.Value:
    return env.compile(expr).eval(data={"a": A(n="1"), "b": B(n="2")})


def test_same_kinds_on_different_receivers_dispatch_in_python() -> None:
    env = _env([
        Fn("t", "Look", "t_look_a", T.STRING, (message(A_TYPE, A), STRING), lambda r, s: "A" + s, member=True),
        Fn("u", "Look", "t_look_b", T.STRING, (message(B_TYPE, B), STRING), lambda r, s: "B" + s, member=True),
    ])
    assert _eval(env, 'a.Look("x")').plain_value() == "Ax"
    assert _eval(env, 'b.Look("y")').plain_value() == "By"


def test_shared_name_is_declared_once_in_first_library() -> None:
    decls = build([
        Fn("first", "Same", "t_same_1", T.STRING, (STRING,), lambda s: s),
        Fn("second", "Same", "t_same_2", T.STRING, (INT,), lambda i: str(i)),
    ]).by_library
    assert list(decls) == ["first"]
    assert len(decls["first"]) == 1


def test_duplicate_overload_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate overload id"):
        build([Fn("t", "F", "dup", T.STRING, (), lambda: ""), Fn("t", "G", "dup", T.STRING, (), lambda: "")])


@pytest.mark.parametrize(
    ("result", "words"),
    [(2**70, "does not fit in 64 bits"), (object(), "unsupported value type"), ({1.5: "x"}, "unsupported map key")],
)
def test_unrepresentable_results_are_error_values(result: object, words: str) -> None:
    env = _env([Fn("t", "Bad", "t_bad", T.DYN, (), lambda: result)])
    value = _eval(env, "Bad()")
    assert value.type() == T.ERROR and words in str(value.value())


def test_exceptions_become_error_values() -> None:
    def boom() -> str:
        raise KeyError("k")

    env = _env([Fn("t", "Boom", "t_boom", T.STRING, (), boom)])
    value = _eval(env, "Boom()")
    assert value.type() == T.ERROR and "no such key: k" in str(value.value())


def test_full_environment_builds_with_every_library() -> None:
    # A function name declared twice (here or by the Kubernetes libraries)
    # makes every compile fail with "declared multiple times".
    assert len(all_libraries()) >= len(LIBRARIES)
    environment().compile("true")


def test_kyverno_libraries_are_not_kubernetes_libraries() -> None:
    assert LIBRARIES and all(not lib.kubernetes for lib in LIBRARIES)
    assert {lib.name for lib in LIBRARIES} >= {
        "kyverno.image", "kyverno.user", "kyverno.hash", "kyverno.math", "kyverno.json", "kyverno.yaml", "kyverno.x509",
        "kyverno.time", "kyverno.transform", "kyverno.random", "kyverno.resource", "kyverno.http",
        "kyverno.globalcontext", "kyverno.imagedata",
    }


@pytest.mark.parametrize(
    "expr",
    [
        'parseImageReference("nginx").registry()', 'image("nginx").tag()', 'isImage("x")', 'parseServiceAccount("u").Name',
        'md5("")', 'sha1("")', 'sha256("")', 'hash.sha256("")', "math.round(1.5, 0)", 'json.unmarshal("{}")',
        "json.marshal({})", 'yaml.parse("")', 'x509.decode("")', "time.now()", 'time.toCron(timestamp("2025-01-01T00:00:00Z"))',
        'time.truncate(time.now(), duration("1h"))', 'listObjToMap([], [], "a", "b")', "random()", 'random("a")',
        'resource.Get("v1", "pods", "", "x")', 'resource.list("v1", "pods", "")', 'http.Get("u")', 'globalContext.Get("e", "")',
        'image.GetMetadata("nginx")', 'user.parseServiceAccount("u")', 'transform.listObjToMap([], [], "a", "b")',
    ],
)
def test_compiles_in_the_policy_environment(expr: str) -> None:
    environment().compile(expr)
