"""Evaluating ImageValidatingPolicies on a request or an object (pure: registry reads go through the Registry the
caller gives, vpol.engine.registry_access), as Kyverno 1.19.1's ivpol engine does (docs/internals/image-validating.md,
"Engine semantics"):

1. matchConstraints (a namespaced policy: its own namespace only), then matchConditions (false: not matched; errors:
   an error, or not matched under failurePolicy Ignore);
2. PolicyExceptions whose conditions hold exempt the subject (those naming images or values play no part);
3. the images: the default extractors of the kind (containers, initContainers and ephemeralContainers of Pods, pod
   controllers and CronJobs) and the policy's ``images``, each list keeping the references matchImageReferences
   selects (none given: all);
4. ``verifyDigest``: a selected image without a digest fails the policy, ``image <img> does not have a digest``;
5. every selected image is loaded (its digest resolved): a failure is the policy's error;
6. the validations in order, with ``images``, ``attestors`` (their CEL fields evaluated) and ``attestations``; the
   first false one fails the policy with its message (vpol adds why each attestor did not verify: the image, the
   attestor and the reason); audit annotations become the result's properties;
7. ``required``, across the policies of one request (:func:`apply_required`): a passing policy fails for any
   selected image no verify function verified.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vpol.cel.backend import current, using
from vpol.cel.environment import EnvSpec, environment
from vpol.cel.libraries.kyverno import imageref
from vpol.cel.libraries.kyverno.imageverify_lib import verifying
from vpol.engine.evaluate import (
    ERROR,
    FAIL,
    LOAD_FAILED,
    PASS,
    SKIP,
    WARN,
    CompiledException,
    EvaluationError,
    Result,
    SubjectData,
    PolicyRun,
    conditions_outcome,
    exception_matches,
    validate,
)
from vpol.engine.image_metadata import MetadataCache
from vpol.engine.image_verification import Outcomes, Verification, VerificationCache
from vpol.engine.match import rules_match, selectors_match
from vpol.engine.registry_access import Registry, RegistryError
from vpol.engine.request import Subject
from vpol.model.image_glob import glob_matches
from vpol.policies.image_validating.autogen import image_autogen_configs
from vpol.policies.image_validating.compile import CompiledImageValidatingPolicy, compile_image_validating_policy
from vpol.policies.image_validating.model import ImageValidatingPolicy

#: The pod spec of each kind with default image extractors (Kyverno's pkg/cel/compiler/images.go), by (group,
#: resource).
POD_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): ("spec",),
    **{("apps", r): ("spec", "template", "spec") for r in ("deployments", "statefulsets", "daemonsets",
                                                            "replicasets")},
    ("batch", "jobs"): ("spec", "template", "spec"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template", "spec"),
}
DEFAULT_EXTRACTORS = ("containers", "initContainers", "ephemeralContainers")
#: How Kyverno's ivpol engine begins the message of a policy whose evaluation failed (a validation's CEL error
#: included: its Evaluate returns the error and the engine wraps it).
EVALUATE_FAILED = "failed to evaluate policy: "


def default_images(subject: Subject) -> dict[str, list[str]]:
    """The default extractors' images of ``subject`` (none for other kinds)."""
    path = POD_SPEC_PATHS.get((subject.type.group, subject.type.resource))
    if path is None:
        return {}
    node: Any = subject.object if subject.object is not None else subject.old_object
    for step in path:
        node = node.get(step) if isinstance(node, Mapping) else None
    spec = node if isinstance(node, Mapping) else {}
    return {name: [str(c.get("image")) for c in spec.get(name) or [] if isinstance(c, Mapping) and c.get("image")]
            for name in DEFAULT_EXTRACTORS}


@dataclass
class ImageOutcome:
    """One policy's result on one subject and the images it selected (for ``required``)."""

    result: Result
    images: list[str] = field(default_factory=list)
    required: bool = True


class ImagePolicyEngine:
    """A compiled ImageValidatingPolicy with its exceptions, ready to evaluate subjects."""

    def __init__(self, policy: ImageValidatingPolicy, exceptions: Sequence[CompiledException] = ()):
        self.policy = policy
        self.compiled: CompiledImageValidatingPolicy = compile_image_validating_policy(policy)
        self.exceptions = [e for e in exceptions if e.exception.applies_to(policy)]
        #: image.GetMetadata's answers, read with the policy's registry client.
        self._metadata = MetadataCache()
        #: The policy and its pod-controller variants (autogen), each compiled when first needed.
        self._variants: list[tuple[ImageValidatingPolicy, CompiledImageValidatingPolicy | None]] = [
            (policy, self.compiled), *((variant, None) for _n, _t, variant in image_autogen_configs(policy))]

    @property
    def ok(self) -> bool:
        return self.compiled.ok

    def selects(self, subject: Subject) -> bool:
        return self._variant(subject) is not None

    def _variant(self, subject: Subject) -> CompiledImageValidatingPolicy | None:
        """The compiled policy or autogen variant whose constraints select ``subject``."""
        policy = self.policy
        if policy.namespace and not (subject.type.namespaced and subject.namespace == policy.namespace):
            return None
        for index, (variant, compiled) in enumerate(self._variants):
            match = variant.spec.match_constraints
            chosen = policy.json_mode if subject.json_payload else \
                match is not None and rules_match(match, subject) and selectors_match(match, subject)
            if chosen:
                if compiled is None:
                    compiled = compile_image_validating_policy(variant)
                    self._variants[index] = (variant, compiled)
                return compiled
        return None

    def image_selected(self, image: str, compiled: CompiledImageValidatingPolicy | None = None) -> bool:
        """Whether matchImageReferences select ``image`` (all images when there are none)."""
        references = (compiled or self.compiled).image_references
        if not references:
            return True
        for reference in references:
            if isinstance(reference, str):
                if glob_matches(reference, image):
                    return True
                continue
            try:
                value = reference.expression.eval(_reference_activation(image)).plain_value()
            except Exception:  # noqa: BLE001 - an expression that cannot be evaluated selects nothing
                continue
            if value is True:
                return True
        return False

    def evaluate(self, subject: Subject, *, registry: Registry, outcomes: Outcomes | None = None,
                 cache: VerificationCache | None = None, deadline: float | None = None,
                 loaded: dict[str, Any] | None = None) -> ImageOutcome | None:
        """The policy's outcome on ``subject`` (None when it does not apply). ``outcomes``: the request's
        verification outcomes, shared by its policies; ``loaded``: images loaded for the request, shared too.
        The I/O libraries are served by the current backend, ``image.GetMetadata`` with ``registry``."""
        with using(current().for_registry(registry, self._metadata, deadline)):
            return self._evaluate(subject, registry=registry, outcomes=outcomes, cache=cache, deadline=deadline,
                                  loaded=loaded)

    def _evaluate(self, subject: Subject, *, registry: Registry, outcomes: Outcomes | None,
                  cache: VerificationCache | None, deadline: float | None,
                  loaded: dict[str, Any] | None) -> ImageOutcome | None:
        compiled = self._variant(subject)
        if compiled is None:
            return None
        spec = compiled.policy.spec
        data = SubjectData(subject, spec.evaluation.mode)
        if not compiled.ok:
            return ImageOutcome(self._result(data, ERROR, "failed to compile policy: " + "; ".join(
                p.short() for p in compiled.errors())))
        run = PolicyRun(compiled, data, None)
        stop = conditions_outcome(run, compiled.match_conditions, spec.failure_policy, error_prefix=EVALUATE_FAILED)
        if stop is not None:
            if stop[0] == SKIP:
                return None  # Kyverno: no response for a policy whose conditions do not hold
            return ImageOutcome(self._result(data, *stop))
        for exc, errors in exception_matches(self.exceptions, data):
            if errors:
                if spec.failure_policy == "Ignore":
                    continue
                return ImageOutcome(self._result(data, ERROR, LOAD_FAILED + "; ".join(r for _n, r in errors)))
            e = exc.exception
            if e.allowed_images or e.allowed_values:
                continue  # partial exceptions play no part for this kind (Kyverno)
            return ImageOutcome(self._result(data, SKIP, f"rule is skipped due to policy exception: {e.key}",
                                             exception=e.name), required=False)

        try:
            images = self._images(compiled, subject, run)
        except EvaluationError as exc:
            return ImageOutcome(self._result(data, ERROR, f"{EVALUATE_FAILED}{exc}"))
        selected = list(dict.fromkeys(i for found in images.values() for i in found))
        outcome = ImageOutcome(self._result(data, PASS, "success"), selected,
                               required=spec.validation_configurations.required)
        if spec.validation_configurations.verify_digest:
            for image in selected:
                try:
                    digest = imageref.parse(image).digest
                except imageref.BadReference as exc:
                    outcome.result = self._result(data, ERROR, f"{EVALUATE_FAILED}{exc}")
                    return outcome
                if not digest:
                    outcome.result = self._result(data, FAIL, f"image {image} does not have a digest")
                    return outcome
        verification = Verification(
            registry=registry, matches=lambda image: self.image_selected(image, compiled),
            attestations={a.name: a for a in spec.attestations}, outcomes=outcomes,
            policy_key=(self.policy.uid or self.policy.key, self.policy.generation), cache=cache, deadline=deadline,
            images=loaded)
        for image in selected:
            try:
                verification.load(image)
            except Exception as exc:  # noqa: BLE001 - the loader's error is the policy's
                outcome.result = self._result(data, ERROR, f"{EVALUATE_FAILED}{exc}")
                return outcome
        try:
            attestors = self._attestors(compiled, run)
        except EvaluationError as exc:
            outcome.result = self._result(data, ERROR, f"{EVALUATE_FAILED}{exc}")
            return outcome
        data.bind({"images": images, "attestors": attestors,
                   "attestations": {a.name: a.name for a in spec.attestations}})
        run.rebase(data)
        with verifying(verification):
            outcome.result = self._validate(compiled, run, data, verification)
        return outcome

    # -- steps ----------------------------------------------------------------------------------------------

    def _images(self, compiled: CompiledImageValidatingPolicy, subject: Subject,
                run: PolicyRun) -> dict[str, list[str]]:
        images = default_images(subject) if not subject.json_payload else {}
        for name, prog in compiled.extractors:
            value = run.eval(prog)
            if not isinstance(value, list):
                raise EvaluationError(f"image extractor {name} returned {type(value).__name__}, not a list")
            images[name] = [str(v) for v in value]
        return {name: [i for i in found if self.image_selected(i, compiled)] for name, found in images.items()}

    def _attestors(self, compiled: CompiledImageValidatingPolicy, run: PolicyRun) -> dict[str, Any]:
        """The attestors as written, their CEL fields replaced by their values (Kyverno: a key expression's value
        is the key's data, a StringOrExpression's its value)."""
        out: dict[str, Any] = {a.name: copy.deepcopy(dict(a.raw)) for a in compiled.policy.spec.attestors}
        names = [a.name for a in compiled.policy.spec.attestors]
        for index, sub_path, prog in compiled.attestors:
            value = run.eval(prog)
            if not isinstance(value, str):
                raise EvaluationError(f"failed to convert {sub_path.split('.')[1]} in compiled attestor: "
                                      f"{names[index]}, error: {type(value).__name__} is not a string")
            parts = sub_path.split(".")  # e.g. cosign.key.expression, notary.certs.expression
            node: Any = out[names[index]]
            for step in parts[:-2]:
                node = node.setdefault(step, {})
            holder = node.setdefault(parts[-2], {})
            holder.pop("expression", None)
            holder["data" if parts[-2] == "key" else "value"] = value
        return out

    def _validate(self, compiled: CompiledImageValidatingPolicy, run: PolicyRun, data: SubjectData,
                  verification: Verification) -> Result:
        """The validations and audit annotations, as for a ValidatingPolicy (vpol.engine.evaluate.validate) with
        the errors worded as Kyverno's ivpol engine words them; a failure is followed by why each attestor did
        not verify."""
        def reasons() -> str:
            return "; ".join(f"image {image}: attestor {attestor}{f' ({attestation})' if attestation else ''}: {why}"
                             for (image, attestor, attestation), why in verification.failures.items())

        return validate(compiled, run, lambda *args, **kw: self._result(data, *args, **kw),
                        error_prefix=EVALUATE_FAILED, audit_prefix=EVALUATE_FAILED, explain=reasons)

    def _result(self, data: SubjectData, result: str, message: str, **kw: Any) -> Result:
        if result == FAIL and not self.policy.scored:
            result = WARN
        api_version, kind, namespace, name, uid = data.identity()
        return Result(policy=self.policy.key, result=result, message=message, api_version=api_version, kind=kind,
                      namespace=namespace, name=name, uid=uid, **kw)


def apply_required(outcomes: Sequence[ImageOutcome], verified: Outcomes) -> None:
    """``validationConfigurations.required`` once every policy of a request has run: a passing policy fails for the
    first image it selected that no verify function of the request verified."""
    for outcome in outcomes:
        if outcome.result.result != PASS or not outcome.required:
            continue
        for image in outcome.images:
            state = verified.verified.get(image)
            if state:
                continue
            message = f"image {image} failed signature or attestation verification" if state is False else \
                f"image {image} is not verified: no policy performed a signature or attestation check on it"
            outcome.result = dataclasses.replace(outcome.result, result=FAIL, message=message)
            break


def _reference_activation(image: str) -> Any:
    return environment(EnvSpec(image_reference=True)).Activation(data={"ref": image})


__all__ = ["ImageOutcome", "ImagePolicyEngine", "RegistryError", "apply_required", "default_images"]
