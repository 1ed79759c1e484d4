"""Reading and writing the objects vpol owns: server-side apply, deletion, status patches.

Every write of a generated object is a server-side apply under our field
manager with ``force`` (we own these objects and take back fields someone
else edited: that is the drift repair). Status patches are JSON merge
patches of the status subresource.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.desired.webhook import owner_reference
from vpol.kube.dynamic import (
    METADATA_ANSWER,
    apply_object,
    collection_path,
    create_object,
    encoded,
    list_pages,
    send_encoded,
)
from vpol.model.parse import parse_exception
from vpol.model.policy import PolicyException
from vpol.policies.registry import KINDS

FIELD_MANAGER = "vpol"
GROUP = "policies.kyverno.io"
EXCEPTION_PLURAL = "policyexceptions"
#: The (cluster, namespaced) plurals of each policy kind, by the cluster-wide kind's name (vpol.policies.registry).
PLURALS = {k.kind: k.plurals for k in KINDS}
VALIDATING_PLURALS = PLURALS["ValidatingPolicy"]
POLICY_PLURAL, NAMESPACED_POLICY_PLURAL = VALIDATING_PLURALS
MUTATING_POLICY_PLURAL, NAMESPACED_MUTATING_POLICY_PLURAL = PLURALS["MutatingPolicy"]
IMAGE_VALIDATING_POLICY_PLURAL, NAMESPACED_IMAGE_VALIDATING_POLICY_PLURAL = PLURALS["ImageValidatingPolicy"]
STORAGE_VERSION = "v1"
#: MutatingAdmissionPolicy kinds, each served by one API class per version.
MAP_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
_MAP_METHODS = {"MutatingAdmissionPolicy": "mutating_admission_policy",
                "MutatingAdmissionPolicyBinding": "mutating_admission_policy_binding"}


ADMISSION_GROUP = "admissionregistration.k8s.io"
ADMISSION_PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}
#: The digest (vpol.controller.generated_apply) of the desired object vpol last applied, recorded in the object.
GENERATED_DIGEST_ANNOTATION = "vpol.kyverno.io/generated-digest"


@dataclass(frozen=True)
class Listed:
    """A generated object as listed: its resourceVersion, the digest vpol's last apply recorded in it, and
    whether nothing but vpol's applies wrote its fields (the API server's status writers aside): every entry
    of its managedFields outside a subresource is vpol's Apply."""

    version: str
    digest: str = ""
    ours_only: bool = False

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> "Listed":
        md = item.get("metadata") or {}
        return cls(str(md.get("resourceVersion", "")),
                   str((md.get("annotations") or {}).get(GENERATED_DIGEST_ANNOTATION, "")),
                   written_by_vpol_only(item, operation="Apply"))


def written_by_vpol_only(item: Mapping[str, Any], *, operation: str = "") -> bool:
    """Whether nothing but vpol (by ``operation`` only, when given) wrote the object's fields: its managedFields
    outside a subresource (the API server's status writers) name no other manager. Then vpol replacing or
    skipping a write of it loses nothing of anyone else's."""
    managed = [m for m in (item.get("metadata") or {}).get("managedFields") or []
               if isinstance(m, Mapping) and not m.get("subresource")]
    return bool(managed) and all(m.get("manager") == FIELD_MANAGER and (not operation or m.get("operation") ==
                                                                         operation) for m in managed)


def not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


class Objects:
    """Typed access to what vpol reads and writes."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        # Typed as Any: the generated client's annotations do not describe dict bodies and results.
        self.admission: Any = client.AdmissionregistrationV1Api(api)
        self.custom: Any = client.CustomObjectsApi(api)

    # -- policies

    def get_policy(self, key: str, plurals: tuple[str, str] = VALIDATING_PLURALS) -> dict[str, Any] | None:
        """The policy with key ``name`` (cluster-wide) or ``namespace/name`` (namespaced) of the kind whose
        resources are ``plurals`` (cluster-wide, namespaced; vpol.model.kind.PolicyKind.plurals)."""
        cluster, namespaced = plurals
        namespace, _, name = key.rpartition("/")
        try:
            if namespace:
                return self.custom.get_namespaced_custom_object(GROUP, STORAGE_VERSION, namespace, namespaced,
                                                                name)
            return self.custom.get_cluster_custom_object(GROUP, STORAGE_VERSION, cluster, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list_policies(self, plurals: tuple[str, str] = VALIDATING_PLURALS) -> list[dict[str, Any]]:
        """Every policy, cluster-wide and namespaced, of the kind whose resources are ``plurals`` (none of a variant
        whose CRD is not installed)."""
        items: list[dict[str, Any]] = []
        for plural in plurals:
            try:
                out = self.custom.list_cluster_custom_object(GROUP, STORAGE_VERSION, plural)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise
            items.extend(out.get("items") or [])
        return items

    def list_exceptions(self) -> list[dict[str, Any]]:
        try:
            out = self.custom.list_cluster_custom_object(GROUP, "v1alpha1", EXCEPTION_PLURAL)
        except ApiException as exc:
            if exc.status in (403, 404):  # no CRD installed, or not allowed: no exceptions
                return []
            raise
        return list(out.get("items") or [])

    def policy_exceptions(self) -> list[PolicyException]:
        """Every PolicyException that parses (those that do not are reported by the validation webhook and
        `vpol check`, not here)."""
        parsed = (parse_exception(body)[0] for body in self.list_exceptions())
        return [exc for exc in parsed if exc is not None]

    def patch_policy_status(self, key: str, status: Mapping[str, Any],
                            plurals: tuple[str, str] = VALIDATING_PLURALS) -> str:
        """Merge-patch the status of the policy with ``key`` of the kind whose resources are ``plurals``; returns
        the policy's new resourceVersion."""
        cluster, namespaced = plurals
        namespace, _, name = key.rpartition("/")
        body = {"status": dict(status)}
        if namespace:
            result = self.custom.patch_namespaced_custom_object_status(GROUP, STORAGE_VERSION, namespace,
                                                                       namespaced, name, body)
        else:
            result = self.custom.patch_cluster_custom_object_status(GROUP, STORAGE_VERSION, cluster, name, body)
        return str(((result or {}).get("metadata") or {}).get("resourceVersion", ""))

    # -- generated admission policies

    def _map_api(self, api_version: str) -> Any:
        """The generated client's API class for an ``admissionregistration.k8s.io/<version>``."""
        version = api_version.rpartition("/")[2]
        return getattr(client, f"Admissionregistration{version[0].upper()}{version[1:]}Api")(self.api)

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply (field manager vpol, forced) of one admissionregistration.k8s.io object; the object
        as stored. Sent generically: the generated client would validate the arguments, parse the answer into
        its models and turn those back into a dict."""
        plural = ADMISSION_PLURALS.get(str(obj.get("kind", "")))
        if plural is None:
            raise ValueError(f"vpol does not apply {obj.get('kind')}")
        group, _slash, version = str(obj["apiVersion"]).rpartition("/")
        return apply_object(self.api, group, version, plural, "", dict(obj), field_manager=FIELD_MANAGER)

    def get_vap(self, name: str) -> dict[str, Any] | None:
        try:
            return self.api.sanitize_for_serialization(self.admission.read_validating_admission_policy(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_webhook_configuration(self, name: str, mutating: bool = False) -> dict[str, Any] | None:
        read = self.admission.read_mutating_webhook_configuration if mutating else \
            self.admission.read_validating_webhook_configuration
        try:
            return self.api.sanitize_for_serialization(read(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def cluster_role_reference(self, name: str) -> dict[str, Any] | None:
        """An ownerReference to the ClusterRole ``name``; None when it does not exist."""
        try:
            role: Any = client.RbacAuthorizationV1Api(self.api).read_cluster_role(name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return owner_reference("rbac.authorization.k8s.io/v1", "ClusterRole", name, str(role.metadata.uid))

    def delete_webhook_configuration(self, name: str, mutating: bool = False) -> bool:
        """Delete it; False when it did not exist."""
        delete = self.admission.delete_mutating_webhook_configuration if mutating else \
            self.admission.delete_validating_webhook_configuration
        try:
            delete(name)
            return True
        except ApiException as exc:
            if exc.status != 404:
                raise
            return False

    def list_generated(self, label_selector: str) -> dict[tuple[str, str], Listed]:
        """(kind, name) -> what :class:`Listed` says of every VAP and binding carrying ``label_selector``."""
        return self._list_admission(("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"), "v1",
                                    label_selector)

    def list_generated_maps(self, label_selector: str, api_version: str) -> dict[tuple[str, str], Listed]:
        """The same of every MutatingAdmissionPolicy and binding carrying ``label_selector``."""
        return self._list_admission(MAP_KINDS, api_version.rpartition("/")[2], label_selector)

    def _list_admission(self, kinds: Sequence[str], version: str, label_selector: str
                        ) -> dict[tuple[str, str], Listed]:
        out = {}
        for kind in kinds:
            for items, _rv in list_pages(self.api, ADMISSION_GROUP, version, ADMISSION_PLURALS[kind],
                                         label_selector=label_selector):
                for item in items:
                    out[(kind, str(item["metadata"]["name"]))] = Listed.of(item)
        return out

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create an events.k8s.io/v1 Event (generically, as reports are written: the generated EventsV1Api
        validates its arguments with pydantic, parses the Event sent back into models and loads their module)."""
        send_encoded(self.api, "POST", collection_path("events.k8s.io", "v1", "events", namespace),
                     encoded(dict(body)), content_type="application/json", accept=METADATA_ANSWER)

    def dry_run_configmap(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A dry-run CREATE of a ConfigMap (admission runs, nothing is stored): the object the API server would
        store; its refusal raises ApiException."""
        return create_object(self.api, "", "v1", "configmaps", namespace, dict(body), dry_run=True)

    def delete_map(self, kind: str, name: str, api_version: str) -> None:
        try:
            getattr(self._map_api(api_version), f"delete_{_MAP_METHODS[kind]}")(name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete(self, kind: str, name: str) -> None:
        try:
            if kind == "ValidatingAdmissionPolicy":
                self.admission.delete_validating_admission_policy(name)
            else:
                self.admission.delete_validating_admission_policy_binding(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
