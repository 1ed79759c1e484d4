"""The ImageValidatingPolicies of one set evaluated together on one subject: what an evaluation worker holds for the
kind (vpol.policies.sandbox's ``load``/``call``), for a background scan or an admission request.

A request's policies share their verification outcomes and loaded images (``required`` is decided across them,
:func:`vpol.policies.image_validating.engine.apply_required`), and successful verifications are cached across
subjects for as long as the set is held. Registries are read with the client of each policy's access (its pull
Secrets, ``allowInsecureRegistry``), built here, in the process that evaluates, from what the caller sends as plain
data; every answer carries the registry requests and cache lookups it made, for the caller's metrics.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.libraries.kyverno import imageref
from vpol.engine.evaluate import ERROR, Result, compile_exception
from vpol.engine.image_verification import Outcomes, VerificationCache
from vpol.engine.match import constraints_match
from vpol.engine.registry_access import Registry, RegistryError
from vpol.engine.request import Subject
from vpol.model.policy import PolicyException
from vpol.policies.image_validating.autogen import image_autogen_configs
from vpol.policies.image_validating.engine import POD_SPEC_PATHS, ImageOutcome, ImagePolicyEngine, apply_required
from vpol.policies.image_validating.model import ImageValidatingPolicy

#: What a policy's registry client is built from: called with what to tell of each request sent (its kind:
#: manifest, blob, referrer, token), it returns the client. Equal accesses share one client.
RegistryAccess = Callable[[Callable[[str], None]], Registry]


@dataclass
class Tally:
    """What one answer cost: registry requests by kind, and verification cache lookups."""

    requests: Counter[str] = field(default_factory=Counter)
    hits: int = 0
    misses: int = 0


@dataclass
class Evaluated:
    """The policies' results on one subject (``required`` applied across them) and what that cost."""

    results: list[Result]
    tally: Tally


@dataclass
class Pinned:
    """Digest pinning of one object (the mutating image webhook): the JSON patch replacing each selected tag by its
    digest, the tags that could not be resolved under a policy with failurePolicy Fail, and what that cost."""

    patch: list[dict[str, Any]]
    errors: list[str]
    tally: Tally


class ImageEvaluation:
    """One set of ImageValidatingPolicies, their exceptions and registry access, ready to evaluate subjects."""

    def __init__(self, policies: Sequence[ImageValidatingPolicy], exceptions: Sequence[PolicyException] = (),
                 access: Mapping[str, RegistryAccess] | None = None):
        compiled = [compile_exception(e) for e in exceptions]
        self.engines = [ImagePolicyEngine(p, compiled) for p in sorted(policies, key=lambda p: p.key)]
        self._access = dict(access or {})
        self._clients: dict[Hashable, Registry] = {}
        self._tally = Tally()
        self.cache = VerificationCache(on_lookup=self._looked_up)

    # -- what a worker is called for ---------------------------------------------------------------------

    def evaluate(self, subject: Subject, seconds: float, only: Sequence[str] | None = None) -> Evaluated:
        """The results of the policies (``only``: those of these keys) on ``subject``, registry reads given up after
        ``seconds``."""
        deadline = time.monotonic() + seconds
        verified = Outcomes()
        loaded: dict[str, Any] = {}
        outcomes: list[ImageOutcome] = []
        for engine in self.engines:
            if only is not None and engine.policy.key not in only:
                continue
            outcome = engine.evaluate(subject, registry=self._registry(engine.policy), outcomes=verified,
                                      cache=self.cache, deadline=deadline, loaded=loaded)
            if outcome is not None:
                outcomes.append(outcome)
        apply_required(outcomes, verified)
        return Evaluated([o.result for o in outcomes], self._taken())

    def pin(self, subject: Subject, seconds: float, failure_policy: str) -> Pinned:
        """The digests of the tags ``subject``'s pod spec names, for the policies of ``failure_policy`` whose
        ``mutateDigest`` holds (the default) and that select the subject and the image; registry reads given up
        after ``seconds``. Nothing for a request that is not a CREATE or UPDATE of a kind with a pod spec."""
        deadline = time.monotonic() + seconds
        path = POD_SPEC_PATHS.get((subject.type.group, subject.type.resource))
        spec: Any = subject.object
        if path is None or not isinstance(spec, Mapping) or subject.operation not in ("CREATE", "UPDATE"):
            return Pinned([], [], self._taken())
        for step in path:
            spec = spec.get(step) if isinstance(spec, Mapping) else None
        if not isinstance(spec, Mapping):
            return Pinned([], [], self._taken())
        pinning = [e for e in self.engines if e.policy.spec.failure_policy == failure_policy
                   and e.policy.spec.validation_configurations.mutate_digest and e.selects(subject)]
        patch: list[dict[str, Any]] = []
        errors: list[str] = []
        for name in ("containers", "initContainers", "ephemeralContainers"):
            for index, container in enumerate(spec.get(name) or []):
                image = container.get("image") if isinstance(container, Mapping) else None
                if not isinstance(image, str) or "@" in image:
                    continue
                wanting = [e for e in pinning if e.image_selected(image)]
                if not wanting:
                    continue
                try:
                    ref = imageref.parse(image)
                    digest = self._registry(wanting[0].policy).manifest(ref.registry, ref.repository, ref.tag,
                                                                        deadline).digest
                except (RegistryError, imageref.BadReference) as exc:
                    if any(e.policy.spec.failure_policy == "Fail" for e in wanting):
                        errors.append(f"failed to resolve digest for image {image}: {exc}")
                    continue
                pointer = "/" + "/".join([*path, name, str(index), "image"])
                patch.append({"op": "replace", "path": pointer, "value": f"{image}@{digest}"})
        return Pinned(patch, errors, self._taken())

    # -- inside -----------------------------------------------------------------------------------------

    def _registry(self, policy: ImageValidatingPolicy) -> Registry:
        access = self._access.get(policy.key)
        if access is None:
            raise RegistryError(f"no registry access was given for ImageValidatingPolicy {policy.key}")
        client = self._clients.get(access)
        if client is None:
            client = self._clients[access] = access(self._sent)
        return client

    def _sent(self, kind: str) -> None:
        self._tally.requests[kind] += 1

    def _looked_up(self, hit: bool) -> None:
        if hit:
            self._tally.hits += 1
        else:
            self._tally.misses += 1

    def _taken(self) -> Tally:
        tally, self._tally = self._tally, Tally()
        return tally


def may_select(policy: ImageValidatingPolicy, subject: Subject) -> bool:
    """Whether ``policy`` (or one of its pod-controller variants) may apply to ``subject``: its constraints select
    it (what is known without evaluating; the policy's error then names the subject)."""
    if policy.namespace and not (subject.type.namespaced and subject.namespace == policy.namespace):
        return False
    variants = [policy, *(v for _name, _targets, v in image_autogen_configs(policy))]
    return any(constraints_match(v.spec.match_constraints, subject) for v in variants)


def failed(policies: Sequence[ImageValidatingPolicy], subject: Subject, why: str) -> list[Result]:
    """An error from each policy that may apply to ``subject``, whose evaluation did not finish (``why``)."""
    return [Result(policy=p.key, result=ERROR, message=why, api_version=subject.type.api_version,
                   kind=subject.type.kind, namespace=subject.namespace, name=subject.name)
            for p in policies if may_select(p, subject)]


def worker_engine(policies: Sequence[ImageValidatingPolicy], exceptions: Sequence[PolicyException],
                  access: Mapping[str, RegistryAccess]) -> ImageEvaluation:
    """The engine an evaluation worker builds from plain data (vpol.policies.sandbox)."""
    return ImageEvaluation(policies, exceptions, access)
