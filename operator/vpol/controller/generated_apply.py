"""Server-side apply of a policy's generated objects (VAPs, MAPs and their bindings), skipping the ones that
cannot have changed.

A reconcile runs whenever a policy or one of its generated objects changes, and the API server itself
changes the VAPs (their type-checking status) right after they are written, so most reconciles find the
generated objects as they left them. Applying them again is a no-op for the object but not for the API
server (decode, merge, compare: measured at 108 such applies in the first 16 s of an operator restarted on 16
policies). An object is applied again unless one of these holds:

* what would be applied is what this process applied last (a digest of the desired object), and the
  object's resourceVersion, listed at the start of the reconcile, is the one that apply returned: nobody
  (not even the API server's status writer) has written it since; or
* (a restarted process, or a status write since) the object records the digest of what would be applied
  (vpol writes it in the annotation ``vpol.kyverno.io/generated-digest`` with every apply) and nothing but
  vpol's applies wrote its fields: its managedFields, status subresources aside, hold only vpol's Apply.
  Someone else's change, whatever the tool, adds their entry (or takes vpol's fields), so it is applied.

Anything else (another spec, a change by anyone) applies, so drift is repaired as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.rest import ApiException

from vpol.kube.objects import GENERATED_DIGEST_ANNOTATION, Listed, Objects

Key = tuple[str, str]


def digest(obj: Mapping[str, Any]) -> str:
    """A digest of a desired object (its canonical JSON)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def api_message(exc: ApiException) -> str:
    """The message of the API server's Status in an error, else its reason."""
    try:
        return str(json.loads(exc.body or "").get("message", exc.reason))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def with_digest(obj: Mapping[str, Any], value: str) -> dict[str, Any]:
    """``obj`` with the digest of its desired form in its annotations (a copy)."""
    metadata = dict(obj["metadata"])
    metadata["annotations"] = {**(metadata.get("annotations") or {}), GENERATED_DIGEST_ANNOTATION: value}
    return {**obj, "metadata": metadata}


class GeneratedObjects:
    """What one reconciler applied: (kind, name) -> resourceVersion after its apply (``versions``: the watch
    echo of our own write needs no reconcile), and the digest applied."""

    def __init__(self, objects: Objects):
        self.objects = objects
        self.versions: dict[Key, str] = {}
        self._applied: dict[Key, tuple[str, str]] = {}

    def changed(self, desired: Sequence[Mapping[str, Any]], existing: Mapping[Key, Listed]) -> bool:
        """Whether any of ``desired`` is not as ``existing`` listed it before :meth:`apply` (a write of ours, or
        of anyone's since our last, made it differ)."""
        for obj in desired:
            key = (obj["kind"], obj["metadata"]["name"])
            listed = existing.get(key)
            if self.versions.get(key) != (listed.version if listed is not None else None):
                return True
        return False

    def apply(self, desired: Sequence[dict[str, Any]], existing: Mapping[Key, Listed],
              applied: list[str]) -> tuple[bool, str]:
        """Apply ``desired`` (``existing``: (kind, name) -> the object as listed now), appending the names
        written to ``applied``; (False, why) when the API server refused one (400/422), else (True, summary).
        Other API errors are raised (transient: the queue retries)."""
        for obj in desired:
            key = (obj["kind"], obj["metadata"]["name"])
            wanted = digest(obj)
            last = self._applied.get(key)
            listed = existing.get(key)
            version = listed.version if listed is not None else None
            if (last is not None and last == (wanted, version)) or \
                    (listed is not None and listed.digest == wanted and listed.ours_only):
                self.versions[key] = listed.version if listed is not None else ""
                self._applied[key] = (wanted, self.versions[key])
                continue
            try:
                result = self.objects.apply(with_digest(obj, wanted))
            except ApiException as exc:
                if exc.status in (400, 422):
                    return False, f"the API server rejected {key[0]} {key[1]}: {api_message(exc)}"
                raise
            meta = (result or {}).get("metadata") or {}
            version = str(meta.get("resourceVersion") or meta.get("resource_version") or "")
            self.versions[key] = version
            self._applied[key] = (wanted, version)
            applied.append(key[1])
        return True, "generated " + ", ".join(o["metadata"]["name"] for o in desired)
