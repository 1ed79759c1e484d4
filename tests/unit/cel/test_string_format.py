"""string.format as cel-go writes it (vpol.cel.libraries.kyverno.format_lib, vpol.cel.format_calls).

What each clause writes is compared with Kyverno's engine in tests/differential/suites/string-format; here:
the rewrite of the evaluated program, the errors, and Go's shortest double form against cel-cpp's string().
"""

from __future__ import annotations

import random
import struct

import pytest

from tests.unit.engine.test_evaluate import run
from tests.unit.policies import make_policy, pod
from vpol.cel.environment import EnvSpec, environment
from vpol.cel.compat import rewrite
from vpol.cel.compat.rules import GO_FORMAT
from vpol.cel.libraries.kyverno.format_lib import FormatError, format_string
from vpol.cel.libraries.kyverno.go_text import shortest_g


@pytest.mark.parametrize(("src", "want"), [
    ('"%s".format([x])', 'vpol_format("%s", [x])'),
    ('object.a.b.format([1, "%d".format([2])])', 'vpol_format(object.a.b, [1, vpol_format("%d", [2])])'),
    ("(a + b).format([c])", "vpol_format((a + b), [c])"),
    ("x.?y.orValue('').format([1]) // format", "vpol_format(x.?y.orValue(''), [1]) // format"),
    ("a.format(b, c)", "a.format(b, c)"),  # not cel-go's format: reported as written
    ("'format'", "'format'"),
])
def test_format_calls_are_rewritten_to_vpols_implementation(src, want):
    assert rewrite(src, (GO_FORMAT,)).text == want


def test_messages_use_it_and_results_stay():
    policy = make_policy(validations=[{"expression": "false",
                                       "messageExpression": "'containers %s'.format([object.spec.containers.map(c, c.name)])"}])
    res = run(policy, pod())
    assert (res.result, res.message) == ("fail", 'containers ["c"]')


@pytest.mark.parametrize(("template", "args", "error"), [
    ("%s and %s", ["a"], "index 1 out of range"),
    ("%", [1], "unexpected end of string"),
    ("%q", ["a"], 'could not parse formatting clause: unrecognized formatting clause "q"'),
    ("%.f", [1.5], "could not parse formatting clause: error while parsing precision: error while converting"),
    ("%.5", [1.5], "could not parse formatting clause: error while parsing precision: could not find end"),
    ("%d", [1.5], "error during formatting: decimal clause can only be used on integers, was given double"),
    ("%f", [1], "error during formatting: fixed-point clause can only be used on doubles, was given int"),
    ("%s", [{1.5: 1}], "error during formatting: no formatting function for map key of type double"),
])
def test_errors_say_what_cel_go_says(template, args, error):
    with pytest.raises(FormatError) as info:
        format_string(template, args)
    assert str(info.value).startswith(error)


def test_an_error_is_the_message_expressions_error():
    policy = make_policy(validations=[{"expression": "false", "message": "static",
                                       "messageExpression": "'%d'.format([object.metadata.name])"}])
    res = run(policy, pod())
    assert res.result == "fail" and res.message.startswith("failed to evaluate message expression: ")
    assert "decimal clause can only be used on integers, was given string" in res.message


def _random_doubles(n: int) -> list[float]:
    rng = random.Random(7)
    out = [0.1 + 0.2, 1e21, 1e-7, 123456.789, 100000.0, 1234567.0, 5e-324, 1.7976931348623157e308, -2.5e-5]
    while len(out) < n:
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if value == value and abs(value) != float("inf"):
            out.append(value)
            out.append(float(rng.randint(-10**7, 10**7)) / 10 ** rng.randint(0, 9))
    return out


def test_shortest_double_form_is_what_string_gives():
    # cel-cpp's string(double) writes Go's shortest form (checked against Kyverno's engine); %s in format must
    # write the same.
    env = environment(EnvSpec())
    program = env.compile("object.map(v, string(v))")
    values = _random_doubles(3000)
    want = program.eval(env.Activation(data={"object": values})).plain_value()
    assert [shortest_g(v) for v in values] == want


@pytest.mark.parametrize(("src", "column", "message"), [
    # (what Kyverno's compiler says of each, position included: measured with tests/kyverno's oracle)
    ("'%d'.format([1.5])", 14, "error during formatting: decimal clause can only be used on integers, was given double"),
    ("'%s and %s'.format(['a'])", 19, "index 1 out of range"),
    ("'%'.format([1])", 11, "unexpected end of string"),
    ("'%q'.format(['x'])", 12, 'could not parse formatting clause: unrecognized formatting clause "q"'),
    ("'%.3f'.format([2])", 16, "error during formatting: fixed-point clause can only be used on doubles, was given int"),
    ("'%s'.format([1, 2])", 12, "too many arguments supplied to string.format (expected 1, got 2)"),
    ("'%s %d'.format(['a', 'b'])", 22, "error during formatting: decimal clause can only be used on integers, was given string"),
    ("'%s'.format([object.metadata.?labels])", 29, "error during formatting: string clause can only be used on strings, "
     "bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given optional_type"),
])
def test_format_calls_cel_go_refuses_do_not_compile(src, column, message):
    from vpol.cel.compiler import compile_expression

    program, problems = compile_expression(src, "spec.validations[0].messageExpression", "messageExpression", EnvSpec())
    assert program is None
    assert [(p.expression_position.column, p.message) for p in problems] == [(column, message)]


@pytest.mark.parametrize("src", [
    "'%d'.format([object.spec.replicas])",  # dyn suits every clause
    "'%s: %d, %f, %e, %x, %o, %b'.format(['a', 1, 1.5, 'NaN', b'ab', 8u, true])",
    "'%s'.format([[1, 'a', {'k': [b'x']}]])",
    "'100%%'.format([])",
])
def test_format_calls_that_fit_compile(src):
    from vpol.cel.compiler import compile_expression

    program, problems = compile_expression(src, "spec.validations[0].messageExpression", "messageExpression", EnvSpec())
    assert program is not None, [p.message for p in problems]
