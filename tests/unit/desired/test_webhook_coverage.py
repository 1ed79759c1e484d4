"""The webhook configuration records the policy generations it covers."""

from __future__ import annotations

from tests.unit.policies import make_policy
from vpol.desired.webhook_coverage import ANNOTATION, coverage_annotation, covered, covered_generation


def test_round_trip_through_the_annotation():
    a = make_policy(name="a", validations=[{"expression": "true"}])
    b = make_policy(name="b", validations=[{"expression": "true"}])
    b = type(b)(**{**b.__dict__, "generation": 7, "namespace": "team", "kind": "NamespacedValidatingPolicy"})
    config = {"metadata": {"annotations": coverage_annotation([a, b])}}
    assert covered(config) == {"a": 0, "team/b": 7}
    assert covered_generation(config, "team/b") == 7 and covered_generation(config, "b") is None


def test_unreadable_annotations_cover_nothing():
    for value in ("not json", "[1, 2]", '{"a": "3"}', '{"a": true}'):
        assert covered({"metadata": {"annotations": {ANNOTATION: value}}}) == {}
    assert covered(None) == {} and covered({}) == {}
