"""Every replica's admission view watches each kind the registry says takes part in admission (both variants) and
the PolicyExceptions, and a relist of one variant forgets only that variant's policies of that kind."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from vpol.controller.admission.policies import AdmissionPolicies
from vpol.model.kind import ADMISSION
from vpol.policies.registry import KINDS


def test_every_admission_kind_is_watched_in_both_variants() -> None:
    view = AdmissionPolicies(client.ApiClient())
    watched = {(plural, kind) for plural, kind, _handler in view._watched()}
    wanted = {(plural, name) for k in KINDS if ADMISSION in k.paths for plural, name in zip(k.plurals, k.kinds)}
    assert watched == wanted | {("policyexceptions", "PolicyException")}
    assert set(view.admission_kinds) == {k.kind for k in KINDS if ADMISSION in k.paths}


def test_a_relist_forgets_only_its_own_variant_and_kind() -> None:
    snapshots: list[Any] = []
    view = AdmissionPolicies(client.ApiClient(), on_change=snapshots.append)
    mutating, _ = view.admission_kinds["MutatingPolicy"]
    images, _ = view.admission_kinds["ImageValidatingPolicy"]
    mutating.update({"m": object(), "team/m": object(), "team/n": object()})
    images.update({"team/i": object()})
    view._drop_unlisted("namespacedmutatingpolicies", {"team/n"})
    assert set(mutating) == {"m", "team/n"} and set(images) == {"team/i"}
    assert len(snapshots) == 1 and set(snapshots[0].mutating) == {"m", "team/n"}
    view._drop_unlisted("mutatingpolicies", {"m"})
    assert len(snapshots) == 1  # nothing was gone: nothing published
    view._drop_unlisted("namespacedimagevalidatingpolicies", set())
    assert not images and set(snapshots[-1].images) == set()
