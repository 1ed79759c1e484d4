"""The webhook's input boundary (vpol.engine.review), fuzzed: AdmissionReviews with fields removed, retyped,
replaced by arbitrary JSON, nested deep, truncated or wrongly encoded never make it raise, and whatever it lets
through is handled by what runs after it (the request's subject, the engines' answer, the server's metric labels
and events) without an exception. A search for an input that breaks that downstream code when the boundary is
bypassed shows the property has teeth.

Bounded for CI: a fixed number of examples per property (VPOL_FUZZ_EXAMPLES raises it for a longer local run).
"""

from __future__ import annotations

import gzip
import json
import os
import time
from typing import Any

from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from tests.unit.policies import make_policy
from vpol.engine.admission import subject_for_request
from vpol.engine.review import MAX_DEPTH, REASONS, Refusal, Review, parse_review
from vpol.policies.mutating.engine import MutatingPolicyEngine
from vpol.policies.mutating.model import parse_mutating_policy
from vpol.policies.sandbox import AdmissionCall, admit_request
from vpol.policies.validating.engine import PolicyEngine

EXAMPLES = int(os.environ.get("VPOL_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

VALID: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
    "request": {
        "uid": "fuzz", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "subResource": "",
        "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "name": "cm", "namespace": "default", "operation": "UPDATE",
        "userInfo": {"username": "u", "uid": "1", "groups": ["g"], "extra": {"k": ["v"]}},
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default",
                                                                         "labels": {"a": "b"}}, "data": {"k": "v"}},
        "oldObject": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"}},
        "dryRun": False, "options": {"kind": "UpdateOptions"},
    },
}

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children,
                                                                                      max_size=4), max_leaves=12)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def reviews(draw: st.DrawFn) -> tuple[bytes, str]:
    """A body and its Content-Encoding: the valid review with a few fields removed or replaced by arbitrary JSON,
    sometimes nested deep, truncated, or announced as gzip without being it."""
    doc: Any = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        if not path:
            doc = draw(JSON)
            continue
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
        except (KeyError, IndexError, TypeError):
            continue
        if draw(st.booleans()) and isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            replacement = draw(JSON)
            if draw(st.integers(0, 9)) == 0:  # deep nesting
                for _ in range(draw(st.integers(MAX_DEPTH - 5, MAX_DEPTH + 20))):
                    replacement = [replacement]
            parent[path[-1]] = replacement
    body = json.dumps(doc).encode()
    how = draw(st.sampled_from(["plain", "plain", "plain", "truncated", "gzip", "false-gzip"]))
    if how == "truncated":
        return body[:draw(st.integers(0, max(0, len(body) - 1)))], ""
    if how == "gzip":
        return gzip.compress(body), "gzip"
    if how == "false-gzip":
        return body, "gzip"
    return body, ""


ENGINES = [PolicyEngine(make_policy(name="v", failurePolicy="Fail", matchConstraints={"resourceRules": [{
    "apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}]}, validations=[{
        "expression": "object.metadata.name != 'x' && !('bad' in object.data) && request.userInfo.username != 'x' "
                      "&& (oldObject == null || oldObject.metadata.name == object.metadata.name)"}]))]
_MPOL, _ = parse_mutating_policy({
    "apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy", "metadata": {"name": "m"},
    "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}]},
        "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
            "expression": "Object{metadata: Object.metadata{labels: {'seen': object.metadata.name}}}"}}]}})
assert _MPOL is not None
MUTATING = [MutatingPolicyEngine(_MPOL)]


def downstream(request: dict[str, Any], body: bytes) -> None:
    """What the webhook server runs on a request once it is past the boundary (vpol.controller.admission.server):
    its metric labels, the subject, both engines' answers, the violation events' reading of the object."""
    str(request["kind"]["kind"]) + str(request["operation"])
    subject_for_request(request)
    for mutating in (False, True):
        answer = admit_request(ENGINES, MUTATING, request, AdmissionCall(body, "Fail", mutating=mutating),
                               time.perf_counter())
        json.loads(answer.body)
    obj = request.get("object") or request.get("oldObject") or {}
    (obj.get("metadata") or {}).get("uid")
    (request.get("kind") or {}).get("group")


@FUZZ
@given(reviews())
def test_the_boundary_never_raises_and_what_it_passes_is_handled(case: tuple[bytes, str]) -> None:
    body, encoding = case
    outcome = parse_review(body, encoding)
    if isinstance(outcome, Refusal):
        assert outcome.status in (400, 413) and outcome.reason in REASONS
        assert outcome.message and "\n" not in outcome.message
        json.dumps(outcome.answer())
        return
    assert isinstance(outcome, Review)
    downstream(outcome.request, outcome.body)


def test_bypassing_the_boundary_breaks_what_runs_after_it() -> None:
    """Without the boundary (the body decoded and handed on as it was before), some generated input makes the
    downstream code raise: the property above is not vacuous."""

    def breaks_without_boundary(case: tuple[bytes, str]) -> bool:
        body, _encoding = case
        try:
            request = json.loads(body)["request"]
            downstream(request, body)
        except Exception:  # noqa: BLE001 - any exception is what is looked for
            return True
        return False

    found = find(reviews(), breaks_without_boundary, settings=settings(max_examples=2000, deadline=None, database=None))
    assert isinstance(parse_review(*found), Refusal)


def test_the_valid_review_passes_and_each_class_of_refusal_is_named() -> None:
    body = json.dumps(VALID).encode()
    review = parse_review(body)
    assert isinstance(review, Review) and review.uid == "fuzz"
    downstream(review.request, review.body)
    assert isinstance(parse_review(gzip.compress(body), "gzip"), Review)
    request = VALID["request"]
    cases = {
        "not-json": (b"{", ""),
        "encoding": (body, "gzip"),
        "too-large": (gzip.compress(b" " * (9 * 1024 * 1024)), "gzip"),
        "too-deep": (b"[" * 100_000 + b"]" * 100_000, ""),
        "not-review": (json.dumps({**VALID, "kind": "Pod"}).encode(), ""),
        "invalid-request": (json.dumps({**VALID, "request": {**request, "object": "s"}}).encode(), ""),
    }
    for reason, (data, encoding) in cases.items():
        refusal = parse_review(data, encoding)
        assert isinstance(refusal, Refusal) and refusal.reason == reason, (reason, refusal)
    refusal = parse_review(*cases["invalid-request"])
    assert isinstance(refusal, Refusal) and refusal.uid == "fuzz" and refusal.message == \
        "request.object must be an object, not a string"
    assert refusal.answer()["response"] == {"uid": "fuzz", "allowed": False, "status": {
        "code": 400, "reason": "BadRequest", "message": "request.object must be an object, not a string"}}


def test_the_depth_limit_holds_exactly_in_every_json_encoding_without_walking_shallow_bodies() -> None:
    """A body nested MAX_DEPTH deep passes and one level more is refused, in UTF-8, -16 and -32 (the count of
    bracket bytes that spares shallow bodies the walk must not let a deeper one through); a shallow body full of
    brackets in its strings passes."""
    def nested(levels: int) -> Any:
        value: Any = {"k": "v"}
        for _ in range(levels - 4):  # the review, its request, options and the innermost object: four levels
            value = [value]
        return {**VALID, "request": {**VALID["request"], "options": {"deep": value}}}

    for encoding in ("utf-8", "utf-16", "utf-32"):
        ok = parse_review(json.dumps(nested(MAX_DEPTH)).encode(encoding))
        assert isinstance(ok, Review), (encoding, ok)
        deep = parse_review(json.dumps(nested(MAX_DEPTH + 1)).encode(encoding))
        assert isinstance(deep, Refusal) and deep.reason == "too-deep", (encoding, deep)
    brackets = {**VALID, "request": {**VALID["request"], "object": {
        **VALID["request"]["object"], "data": {"k": "{[" * 1000}}}}
    assert isinstance(parse_review(json.dumps(brackets).encode()), Review)
