"""Asking the API server what the operator's own identity may do (SelfSubjectAccessReview)."""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

VERBS = ("get", "list", "watch")


def missing_permissions(api: client.ApiClient, resources: Iterable[tuple[str, str, str]],
                        verbs: Iterable[str] = VERBS) -> list[str]:
    """``"<verb> <group>/<version> <resource>"`` for each (group, version, resource) not allowed."""
    authz = client.AuthorizationV1Api(api)
    missing = []
    for group, version, resource in resources:
        for verb in verbs:
            review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(group=group, version=version, resource=resource,
                                                                verb=verb)))
            result = authz.create_self_subject_access_review(review)
            if not (result.status and result.status.allowed):
                gv = f"{group}/{version}" if group else version
                missing.append(f"{verb} {gv} {resource}")
    return missing
