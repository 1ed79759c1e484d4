"""One evaluation context for every path: the operator's backend serves globalContext.Get in its own process (what
generation, deletion, the image webhooks and image scans evaluate there), image.GetMetadata through a registry, and
is every thread's default once installed; what is sent to a worker process keeps how to reach a registry."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import pickle
from typing import Any

import pytest

from tests.unit.cel.kyverno.conftest import error, run, value
from tests.unit.policies import pod
from vpol.cel import backend as backend_module
from vpol.cel.backend import Backend, BackendUnavailable, current, install, using
from vpol.cel.global_context import READY, RESOURCE, EntryState
from vpol.engine.global_context import GlobalContextStore
from vpol.engine.image_metadata import MetadataCache, image_metadata
from vpol.engine.registry_access import Fetched, NotFound
from vpol.kube.live_backend import LiveBackend


def store_with(*names: str) -> GlobalContextStore:
    store = GlobalContextStore()
    store.set_state(EntryState("names", RESOURCE, READY, projections=(("all", "[].metadata.name"),)))
    store.replace_objects("names", {f"default/{n}": pod(n) for n in names})
    return store


def test_global_context_is_served_in_the_operators_own_process_and_follows_the_store() -> None:
    store = store_with("a")
    backend = LiveBackend(global_context=store)
    assert value("globalContext.Get('names', 'all')", backend=backend) == ["a"]
    store.upsert("names", pod("b"))
    assert value("globalContext.Get('names', 'all')", backend=backend) == ["a", "b"]
    store.remove("names", "default/a")
    assert value("globalContext.Get('names', 'all')", backend=backend) == ["b"]
    # What generation and deletion evaluate with (the uncached copy) reads the same store.
    assert value("globalContext.Get('names', 'all')", backend=backend.fresh()) == ["b"]
    store.drop("names")
    assert value("globalContext.Get('names', 'all')", backend=backend) is None
    # Without a store (a worker process before it is sent the data): a clear reason, never another entry's data.
    assert "not available in this process" in error("globalContext.Get('names', 'all')", backend=LiveBackend())


def test_an_installed_backend_serves_threads_that_were_never_handed_it() -> None:
    backend = LiveBackend(global_context=store_with("a"))
    previous = install(backend)
    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            assert pool.submit(current).result() is backend
            assert pool.submit(lambda: run("globalContext.Get('names', 'all')").value).result() == ["a"]
        other = Backend()
        with using(other):  # an explicit context still wins
            assert current() is other
        assert current() is backend
    finally:
        install(previous)
    assert current() is previous


class Images:
    """An in-memory registry: manifests by reference, blobs by digest; counts requests."""

    def __init__(self) -> None:
        self.manifests: dict[str, tuple[str, bytes, str]] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests = 0

    def add_manifest(self, reference: str, body: dict[str, Any], digest: str) -> None:
        self.manifests[reference] = (str(body.get("mediaType") or ""), json.dumps(body).encode(), digest)

    def manifest(self, registry: str, repository: str, reference: str, deadline: float | None = None) -> Fetched:
        self.requests += 1
        found = self.manifests.get(f"{registry}/{repository}:{reference}")
        if found is None:
            raise NotFound(f"manifest {registry}/{repository}:{reference}: MANIFEST_UNKNOWN")
        media, body, digest = found
        return Fetched(body, media, digest)

    def blob(self, registry: str, repository: str, digest: str, deadline: float | None = None) -> bytes:
        self.requests += 1
        return self.blobs[digest]

    def referrers(self, registry: str, repository: str, digest: str,
                  deadline: float | None = None) -> list[dict[str, Any]]:
        return []


IMAGE_DIGEST = "sha256:" + "1" * 64
CONFIG_DIGEST = "sha256:" + "2" * 64
INDEX_DIGEST = "sha256:" + "3" * 64
MANIFEST = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": CONFIG_DIGEST, "size": 2},
            "layers": []}
CONFIG = {"architecture": "amd64", "os": "linux", "config": {"Labels": {"team": "payments"}, "User": "1000"}}


def images() -> Images:
    reg = Images()
    reg.add_manifest("registry.local/app:v1", MANIFEST, IMAGE_DIGEST)
    reg.add_manifest(f"registry.local/app:{IMAGE_DIGEST}", MANIFEST, IMAGE_DIGEST)
    reg.add_manifest("registry.local/multi:v2", {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [
            {"mediaType": MANIFEST["mediaType"], "digest": "sha256:" + "4" * 64,
             "platform": {"os": "linux", "architecture": "arm64"}},
            {"mediaType": MANIFEST["mediaType"], "digest": IMAGE_DIGEST,
             "platform": {"os": "linux", "architecture": "amd64"}}]}, INDEX_DIGEST)
    reg.add_manifest(f"registry.local/multi:{IMAGE_DIGEST}", MANIFEST, IMAGE_DIGEST)
    reg.blobs[CONFIG_DIGEST] = json.dumps(CONFIG).encode()
    return reg


def test_image_metadata_has_kyvernos_fields_for_a_tag_a_digest_and_an_index() -> None:
    reg = images()
    tagged = image_metadata(reg, "registry.local/app:v1")
    assert tagged == {"image": "registry.local/app:v1", "registry": "registry.local", "repository": "app",
                      "identifier": "v1", "tag": "v1", "digest": IMAGE_DIGEST,
                      "resolvedImage": f"registry.local/app:v1@{IMAGE_DIGEST}", "manifest": MANIFEST,
                      "config": CONFIG}
    pinned = image_metadata(reg, f"registry.local/app@{IMAGE_DIGEST}")
    assert "tag" not in pinned and pinned["identifier"] == pinned["digest"] == IMAGE_DIGEST
    assert pinned["resolvedImage"] == f"registry.local/app@{IMAGE_DIGEST}"
    # An index: its own digest, the index as JSON, the linux/amd64 image's manifest and config.
    multi = image_metadata(reg, "registry.local/multi:v2")
    assert multi["digest"] == INDEX_DIGEST and multi["imageIndex"]["manifests"][1]["digest"] == IMAGE_DIGEST
    assert multi["manifest"] == MANIFEST and multi["config"] == CONFIG


def test_get_metadata_through_the_backend_as_a_policy_calls_it() -> None:
    reg = images()
    backend = LiveBackend(registry=lambda: reg)
    assert value("image.GetMetadata('registry.local/app:v1').config.config.Labels.team", backend=backend) == \
        "payments"
    assert value("image.getMetadata('registry.local/app:v1').resolvedImage", backend=backend).endswith(IMAGE_DIGEST)
    message = error("image.GetMetadata('registry.local/missing:v1').digest", backend=backend)
    assert "failed to get image data" in message and "MANIFEST_UNKNOWN" in message
    # Without a registry client: a clear reason.
    assert "no registry client" in error("image.GetMetadata('registry.local/app:v1')", backend=LiveBackend())


def test_answers_are_kept_a_while_a_digest_longer_than_a_tag() -> None:
    reg = images()
    now = [0.0]
    cache = MetadataCache(clock=lambda: now[0])
    cache.get(reg, "registry.local/app:v1")
    cache.get(reg, f"registry.local/app@{IMAGE_DIGEST}")
    asked = reg.requests
    first = cache.get(reg, "registry.local/app:v1")
    first["config"]["os"] = "changed by a caller"
    assert cache.get(reg, "registry.local/app:v1")["config"]["os"] == "linux" and reg.requests == asked
    now[0] = 60.0  # past a tag's time, within a digest's
    cache.get(reg, f"registry.local/app@{IMAGE_DIGEST}")
    assert reg.requests == asked
    cache.get(reg, "registry.local/app:v1")
    assert reg.requests > asked


def make_images() -> Images:
    return images()


def test_what_is_sent_to_a_worker_keeps_the_registry_and_leaves_the_store() -> None:
    backend = LiveBackend(http_allowlist=("http://x/",), global_context=store_with("a"),
                          registry=functools.partial(make_images), registry_timeout=3.0)
    copy = pickle.loads(pickle.dumps(backend))
    assert copy.http_allowlist == ("http://x/",) and copy.registry_timeout == 3.0
    assert copy.global_context_source is None
    assert copy.image_metadata("registry.local/app:v1")["digest"] == IMAGE_DIGEST
    with pytest.raises(BackendUnavailable, match="not available in this process"):
        copy.global_context("names", "all")


def test_the_default_backend_module_state_is_a_failing_backend() -> None:
    # Nothing installed: every library call fails with its reason (the CLI and tests open using() blocks).
    assert type(backend_module._PROCESS[0]) is Backend


class NoRegistry:
    """A registry that must not be asked."""

    def manifest(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the registry was asked")

    blob = referrers = manifest


def image_policy_result(validation: str) -> Any:
    from vpol.policies.image_validating.engine import ImagePolicyEngine
    from vpol.engine.subjects import subject_for
    from vpol.engine.request import ResourceType
    from vpol.policies.image_validating.model import parse_image_validating_policy

    policy, problems = parse_image_validating_policy({
        "apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy", "metadata": {"name": "meta"},
        "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                         "operations": ["CREATE"], "resources": ["pods"]}]},
                 "matchImageReferences": [{"glob": "elsewhere.example/*"}],
                 "validationConfigurations": {"mutateDigest": False, "verifyDigest": False, "required": False},
                 "attestors": [{"name": "a", "cosign": {"key": {"data": "unused"}}}],
                 "validations": [{"expression": validation, "message": "no"}]}})
    assert policy is not None, problems
    pod_ = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "registry.local/app:v1"}]}}
    subject = subject_for(pod_, resolve=lambda a, k: ResourceType("", "v1", "pods", "Pod", True))
    outcome = ImagePolicyEngine(policy).evaluate(subject, registry=NoRegistry())  # type: ignore[arg-type]
    assert outcome is not None
    return outcome.result


def test_an_image_policy_reads_metadata_where_the_current_backend_says() -> None:
    from vpol.cel.offline_backend import OfflineBackend

    expression = "object.spec.containers.all(c, image.GetMetadata(c.image).digest == 'sha256:mocked')"
    # Offline: the test context's mocked image, as Kyverno's CLI answers it; the policy's registry is not asked.
    with using(OfflineBackend(images=[{"image": "registry.local/app:v1", "digest": "sha256:mocked"}])):
        assert image_policy_result(expression).result == "pass"
    # In a cluster: read with the policy's own registry client (here one that must not be asked: an error).
    with using(LiveBackend(registry=lambda: images())):
        result = image_policy_result(expression)
        assert result.result == "error" and "the registry was asked" in result.message, result
