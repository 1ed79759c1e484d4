"""Watch events as triggers (vpol.controller.triggers): the Namespace of a trigger the scanner has not seen yet."""

from __future__ import annotations

from typing import Any

import vpol.controller.triggers as triggers
from vpol.engine.match import selectors_match
from vpol.model.policy import LabelSelector, MatchResources

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team", "uid": "u"}}
TEAM = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "labels": {"env": "prod"}}}


def _resolve(api_version: str, kind: str) -> Any:
    return None


def test_a_namespace_not_cached_yet_is_read_so_its_labels_count(monkeypatch: Any) -> None:
    """The scanner's Namespace cache comes from a watch of its own: an object created right after its Namespace can
    come first, and was matched without the Namespace's labels (a namespaceSelector on them passed it over until
    the next full scan, an hour by default)."""
    reads: list[str] = []

    def get_object(_api: Any, group: str, version: str, resource: str, namespace: str, name: str) -> Any:
        reads.append(f"{group}/{version}/{resource}/{name}")
        return TEAM

    monkeypatch.setattr(triggers, "get_object", get_object)
    selector = MatchResources(namespace_selector=LabelSelector(match_labels=(("env", "prod"),)))
    cache: dict[str, dict[str, Any]] = {}

    without = triggers.trigger_subject(dict(CONFIGMAP), "CREATE", _resolve, cache)
    assert without is not None and not selectors_match(selector, without) and reads == []

    api: Any = object()
    subject = triggers.trigger_subject(dict(CONFIGMAP), "CREATE", _resolve, cache, api=api)
    assert subject is not None and selectors_match(selector, subject)
    assert reads == ["/v1/namespaces/team"] and cache["team"] is TEAM
    triggers.trigger_subject(dict(CONFIGMAP), "CREATE", _resolve, cache, api=api)
    assert reads == ["/v1/namespaces/team"]  # cached now
