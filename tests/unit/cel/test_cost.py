"""Work bounds of expressions (vpol.cel.cost): which expressions get a plan, and what the plan measures.

A plan is what lets the webhook's serving process evaluate a request itself (vpol.policies.inline), so the
cases that must have none matter as much as those that must: each ``unbounded`` case below is a way to make
an evaluation take far more than the sizes of the request's lists (quadratic loops, lists built from large
values, libraries with I/O, regular expressions from the request).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vpol.cel import cost
from vpol.cel.environment import EnvSpec, environment
from vpol.cli.inputs import load_policies
from vpol.policies.validating.autogen import autogen_configs
from vpol.policies.validating.compile import compile_policy

REPO = Path(__file__).resolve().parents[3]
ENV = environment(EnvSpec())


def plan_of(*expressions: str, variables: tuple[tuple[str, str], ...] = ()) -> cost.WorkPlan | None:
    compiled_vars = [(name, ENV.compile(src)) for name, src in variables]
    return cost.plan([ENV.compile(src) for src in expressions], compiled_vars)


def pod(containers: list[dict[str, object]], **spec: object) -> dict[str, object]:
    return {"object": {"metadata": {"name": "p", "annotations": {"a": "1", "b": "2"}},
                       "spec": {"containers": containers, **spec}}}


def test_every_pod_security_policy_and_its_variants_has_a_plan() -> None:
    loaded = load_policies([str(REPO / "examples" / "pod-security")])
    assert len(loaded.policies) == 18
    for policy in loaded.policies:
        for variant in [policy, *(c.policy for c in autogen_configs(policy))]:
            compiled = compile_policy(variant)
            expressions = [p.expression for _n, p in compiled.match_conditions]
            expressions += [p.expression for _i, p, _m in compiled.validations]
            expressions += [m.expression for _i, _p, m in compiled.validations if m]
            variables = [(n, p.expression) for n, p in compiled.variables]
            assert cost.plan(expressions, variables) is not None, (variant.name, cost.reason(expressions, variables))


def test_the_work_counts_iterations_and_the_copies_of_map_and_filter() -> None:
    plan = plan_of("object.spec.containers.filter(c, c.ports.exists(p, p.hostPort != 0)).map(c, c.name)"
                   ".size() == 0")
    assert plan is not None
    two = pod([{"name": "a", "ports": [{"hostPort": 0}] * 3}, {"name": "b", "ports": [{"hostPort": 1}] * 3}])
    # filter over 2 containers: 2 iterations + 1 + 2 copies; 6 ports in all; map over the filter's 2 at most: 5
    assert plan.work(two) == 5 + 6 + 5
    many = pod([{"name": f"c{i}", "ports": []} for i in range(100)])
    assert plan.work(many) == 2 * (100 + 100 * 101 // 2)
    assert plan.work(pod([])) == 0


def test_merged_plans_measure_what_the_plans_measure_together_with_shared_ranges_made_one() -> None:
    """The webhook plans a request shape once, by the policies' plans merged (vpol.policies.inline): the merged
    plan's work is the sum of theirs on any request, and ranges over the same lists count once with their times
    added (every Pod Security policy iterates the Pod's containers)."""
    loaded = load_policies([str(REPO / "examples" / "pod-security")])
    plans = []
    for policy in loaded.policies:
        compiled = compile_policy(policy)
        expressions = [p.expression for _i, p, _m in compiled.validations]
        expressions += [m.expression for _i, _p, m in compiled.validations if m]
        plans.append(cost.plan(expressions, [(n, p.expression) for n, p in compiled.variables]))
    assert all(p is not None for p in plans)
    together = cost.merged(p for p in plans if p is not None)
    assert len(together.ranges) < sum(len(p.ranges) for p in plans if p is not None)
    assert together.nodes == sum(p.nodes for p in plans if p is not None)
    containers = [{"name": f"c{i}", "ports": [{"containerPort": 80 + i}], "securityContext": {
        "capabilities": {"add": ["NET_ADMIN"] * i}}} for i in range(4)]
    for roots in (pod([]), pod(containers[:1]), pod(containers, initContainers=containers[:2],
                                                     volumes=[{"name": "v"}] * 3)):
        assert together.work(roots) == sum(p.work(roots) for p in plans if p is not None)
    assert together.work(pod(containers)) > together.work(pod(containers[:1])) > 0
    assert cost.merged([]).work(pod(containers)) == 0


def test_variables_carry_where_their_lists_come_from() -> None:
    plan = plan_of("variables.names.size() == 0", variables=(
        ("all", "dyn(object.spec.containers) + dyn(object.spec.?initContainers.orValue([]))"),
        ("names", "variables.all.map(c, c.name)")))
    assert plan is not None
    assert plan.work(pod([{"name": "a"}], initContainers=[{"name": "i"}, {"name": "j"}])) == 3 + 6


def test_keys_of_a_map_and_their_values_are_parts_of_the_map() -> None:
    plan = plan_of("object.metadata.annotations.filter(k, object.metadata.annotations[k].startsWith('x'))"
                   ".map(k, k + '=' + object.metadata.annotations[k]).size() == 0")
    assert plan is not None
    assert plan.work(pod([])) == 2 * (2 + 3)


def test_literal_lists_multiply_what_runs_inside_them() -> None:
    plan = plan_of("['a', 'b', 'c'].all(x, object.spec.containers.all(c, c.name != x))")
    assert plan is not None
    assert plan.work(pod([{"name": "a"}, {"name": "b"}])) == 3 * 2


@pytest.mark.parametrize("expression", [
    # every container against every container: quadratic
    "object.spec.containers.all(c, object.spec.containers.all(d, c.name != d.name || c == d))",
    # a list of n copies of the whole object
    "object.spec.containers.map(c, object.spec).size() > 0",
    # a linear scan of the whole object in every iteration
    "object.spec.containers.all(c, c.name in object.metadata.labels)",
    "object.spec.containers.all(c, object.metadata.name.startsWith(c.name))",
    "object.spec.containers.all(c, object.metadata.name == object.metadata.namespace)",
    # a regular expression from the request
    "object.metadata.name.matches(object.metadata.namespace)",
    # functions of other libraries (I/O, ranges, formatting)
    "lists.range(10).all(i, i >= 0)",
    "'%s'.format([object.metadata.name]) != ''",
    # iterating a list of unknown size (split of a string)
    "object.metadata.name.split('-').all(s, s != '')",
    # a name the analysis does not know (a library variable)
    "http.Get('https://example.com/x') != null",
])
def test_unbounded(expression: str) -> None:
    assert plan_of(expression) is None
    assert cost.reason([ENV.compile(expression)])


def test_a_variable_built_from_large_values_keeps_loops_over_it_out() -> None:
    assert plan_of("variables.all.all(c, c.name in object.metadata.labels)",
                   variables=(("all", "object.spec.containers"),)) is None
    assert plan_of("variables.allowed.exists(a, object.spec.containers.all(c, c.name != a))",
                   variables=(("allowed", "['x', 'y']"),)) is not None
