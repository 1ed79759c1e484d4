"""How the Kubernetes libraries are declared: wiring, check-only declarations, type checking."""

from __future__ import annotations

import pytest
from cel_expr_python import cel

from tests.unit.cel.kubernetes.conftest import compile_error, policy_env, value, wired
from vpol.cel import environment as envmod
from vpol.cel import types
from vpol.cel.environment import environment
from vpol.cel.libraries import kubernetes
from vpol.cel.libraries.kubernetes.overloads import EXTENDED_NAMES, Fn, run_declarations

T = cel.Type


def test_every_library_is_a_kubernetes_library() -> None:
    assert kubernetes.LIBRARIES
    assert all(lib.kubernetes for lib in kubernetes.LIBRARIES)
    names = {lib.name for lib in kubernetes.LIBRARIES}
    assert {"kubernetes.lists", "kubernetes.regex", "kubernetes.urls", "kubernetes.quantity", "kubernetes.net.ip",
            "kubernetes.net.cidr", "kubernetes.format", "kubernetes.Semver"} <= names


def test_overload_ids_are_unique() -> None:
    ids = [fn.overload_id for fn in kubernetes.all_functions()]
    assert len(ids) == len(set(ids))


def test_shared_names_are_declared_once_across_libraries() -> None:
    built = run_declarations(kubernetes.all_functions())
    by_library = built.by_library
    # isLessThan is implemented by quantity and semver but declared once
    all_decls = [d for decls in by_library.values() for d in decls]
    assert len(all_decls) + len(built.extended) == len({fn.name for fn in kubernetes.all_functions() if fn.env != "check"})


def test_the_policy_environment_builds_and_has_the_libraries() -> None:
    env = environment()
    assert env.compile("quantity('1Gi') == quantity('1024Mi')").return_type() == T.BOOL
    assert env.compile("semver('1.0.0').isLessThan(semver('2.0.0'))").return_type() == T.BOOL


def test_environment_passes_the_extensions() -> None:
    """vpol.cel.environment must pass ``kubernetes.extensions()`` to ``NewEnv``.

    Without them ``[1].indexOf(1)``, ``string(ip(...))``, ``includes``, the
    format optional emulation and ``transformMap`` are missing from policies.
    """
    if not wired(environment()):
        pytest.skip("vpol.cel.environment does not pass kubernetes.extensions() to NewEnv(extensions=...) yet")
    assert value("[1, 2].indexOf(2)") == 1


def test_extended_names_go_through_the_extension() -> None:
    built = run_declarations(kubernetes.all_functions())
    assert built.extended
    # nothing of the functions= route redeclares an existing function
    env = cel.NewEnv(
        descriptor_pool=types.POOL,
        config=cel.NewEnvConfigFromYaml(envmod._EXTENSIONS_YAML),
        variables={"x": T.DYN},
        functions=[d for decls in built.by_library.values() for d in decls],
    )
    assert env.compile("quantity('1').compareTo(quantity('2'))").return_type() == T.INT
    assert "string" in EXTENDED_NAMES and "indexOf" in EXTENDED_NAMES


def test_same_kind_overloads_share_one_dispatching_implementation() -> None:
    # Quantity and Semver both reach isLessThan as messages: one
    # implementation serves both, picking by message type.
    assert value("quantity('1').isLessThan(quantity('2'))") is True
    assert value("semver('1.0.0').isLessThan(semver('2.0.0'))") is True
    assert "isLessThan" in compile_error("quantity('1').isLessThan(semver('1.0.0'))")


def test_a_failing_implementation_is_an_error_value() -> None:
    def boom(_: str) -> str:
        raise ValueError("boom")

    fn = Fn("test", "vpolTestBoom", "vpol_test_boom", (kubernetes.overloads.STRING,), T.STRING, boom)
    built = run_declarations([fn])
    env = cel.NewEnv(
        descriptor_pool=types.POOL, variables={}, functions=[d for decls in built.by_library.values() for d in decls]
    )
    result = env.compile("vpolTestBoom('a')").eval(data={})
    assert result.type() == T.ERROR and "boom" in str(result.value())


@pytest.fixture(scope="module")
def check_env() -> cel.Env:
    """A check-only environment with the exact Kubernetes declarations."""
    return cel.NewEnv(
        descriptor_pool=types.POOL,
        config=cel.NewEnvConfigFromYaml(envmod._EXTENSIONS_YAML),
        variables=envmod.variable_types(envmod.EnvSpec()),
        extensions=[kubernetes.check_extension()],
    )


@pytest.mark.parametrize(
    ("expr", "result"),
    [
        ("[1, 2].sum()", T.INT),
        ("[1.0].sum()", T.DOUBLE),
        ("[1u].sum()", T.UINT),
        ("[duration('1s')].max()", T.DURATION),
        ("['a'].min()", T.STRING),
        ("[1].isSorted()", T.BOOL),
        ("object.items.indexOf(1)", T.INT),
        ("[1].includes(1)", T.BOOL),
        ("'a'.findAll('a', 1)", T.List(T.STRING)),
        ("url('/a').getQuery()", T.Map(T.STRING, T.List(T.STRING))),
        ("sign(quantity('1'))", T.INT),
        ("quantity('1').add(1).asApproximateFloat()", T.DOUBLE),
        ("string(ip('::1'))", T.STRING),
        ("string(cidr('10.0.0.0/8'))", T.STRING),
        ("cidr('::/0').ip().family()", T.INT),
        ("semver('1.0.0', true).major()", T.INT),
        ("format.dns1123Label().validate('x').hasValue()", T.BOOL),
        ("format.named('x').hasValue()", T.BOOL),
    ],
)
def test_check_only_declarations_type_check_like_kubernetes(check_env: cel.Env, expr: str, result: cel.Type) -> None:
    assert check_env.compile(expr).return_type() == result


@pytest.mark.parametrize(
    "expr",
    [
        "isQuantity([1, 2, 3])",  # quantity_test.go: no matching overload
        "quantity('1').sign()",
        "semver('1.0.0').isLessThan(quantity('1'))",
        "ip('::1').containsIP('::1')",
        "['a'].sum()",
        "[{'a': 1}].max()",
        "url('/a').getHost(1)",
    ],
)
def test_check_only_declarations_reject_like_kubernetes(check_env: cel.Env, expr: str) -> None:
    with pytest.raises(RuntimeError, match="ERROR: <input>"):
        check_env.compile(expr)


def test_run_environment_rejects_what_kubernetes_rejects() -> None:
    for expr in ("isQuantity([1, 2, 3])", "['a'].sum()", "semver('1.0.0').isLessThan(quantity('1'))"):
        assert "ERROR: <input>" in compile_error(expr, policy_env())
