"""Kyverno's image library (parseImageReference/image/isImage and Image members).

Expected values come from Kyverno's own library tests
(pkg/cel/libs/image/lib_test.go) and from go-containerregistry's
``name.ParseReference`` rules that Kyverno relies on.
"""

from __future__ import annotations

import pytest

from tests.unit.cel.kyverno.conftest import error, run, value
from vpol.cel.environment import environment

DIGEST = "sha256:6aefddb645ee6963afd681b1845c661d0ea4c3b20ab9db86d9e753b203d385f2"
K8S = "registry.k8s.io/kube-apiserver-arm64"


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # Kyverno's lib_test.go cases
        (f'parseImageReference("{K8S}:latest") == parseImageReference("{K8S}:latest")', True),
        (f'isImage("{K8S}:latest")', True),
        (f'isImage("{K8S}:@")', False),
        (f'parseImageReference("{K8S}").containsDigest()', False),
        (f'parseImageReference("{K8S}:latest").containsDigest()', False),
        (f'parseImageReference("{K8S}@{DIGEST}").containsDigest()', True),
        (f'parseImageReference("{K8S}:latest@{DIGEST}").containsDigest()', True),
        (f'parseImageReference("{K8S}").registry()', "registry.k8s.io"),
        (f'parseImageReference("{K8S}").registry().matches("(registry.k8s.io|ghcr.io)")', True),
        (f'parseImageReference("{K8S}").repository()', "kube-apiserver-arm64"),
        (f'parseImageReference("{K8S}:testtag").identifier()', "testtag"),
        (f'parseImageReference("{K8S}").identifier()', "latest"),
        (f'parseImageReference("{K8S}@{DIGEST}").identifier()', DIGEST),
        (f'parseImageReference("{K8S}:latest@{DIGEST}").identifier()', DIGEST),
        (f'parseImageReference("{K8S}:testtag").tag()', "testtag"),
        (f'parseImageReference("{K8S}").tag()', "latest"),
        (f'parseImageReference("{K8S}@{DIGEST}").tag()', ""),
        (f'parseImageReference("{K8S}").digest()', ""),
        (f'parseImageReference("{K8S}:testtag").digest()', ""),
        (f'parseImageReference("{K8S}@{DIGEST}").digest()', DIGEST),
        (f'parseImageReference("{K8S}:latest@{DIGEST}").digest()', DIGEST),
    ],
)
def test_kyverno_cases(expr: str, expected: object) -> None:
    assert value(expr) == expected


@pytest.mark.parametrize(
    ("ref", "registry", "repository", "tag", "digest"),
    [
        # Docker Hub: index.docker.io, library/ for single names, latest by default
        ("nginx", "index.docker.io", "library/nginx", "latest", ""),
        ("nginx:1.2", "index.docker.io", "library/nginx", "1.2", ""),
        ("docker.io/nginx", "index.docker.io", "library/nginx", "latest", ""),
        ("docker.io/library/busybox:1.35", "index.docker.io", "library/busybox", "1.35", ""),
        ("bitnami/redis:7", "index.docker.io", "bitnami/redis", "7", ""),
        ("index.docker.io/bitnami/redis", "index.docker.io", "bitnami/redis", "latest", ""),
        # a first component is a registry only with '.' or ':'
        ("ghcr.io/kyverno/test-busybox:1.35", "ghcr.io", "kyverno/test-busybox", "1.35", ""),
        ("localhost:5000/team/app:v1", "localhost:5000", "team/app", "v1", ""),
        ("myregistry/busybox:1.35", "index.docker.io", "myregistry/busybox", "1.35", ""),
        ("gcr.io/distroless/static:nonroot", "gcr.io", "distroless/static", "nonroot", ""),
        # an empty tag after ':' is no tag (weak validation), so latest
        ("nginx:", "index.docker.io", "library/nginx", "latest", ""),
        # digests: a tag next to a digest is dropped
        (f"ghcr.io/a/b@{DIGEST}", "ghcr.io", "a/b", "", DIGEST),
        (f"nginx:1.2@{DIGEST}", "index.docker.io", "library/nginx", "", DIGEST),
    ],
)
def test_normalisation(ref: str, registry: str, repository: str, tag: str, digest: str) -> None:
    got = value(
        f'[image("{ref}").registry(), image("{ref}").repository(), image("{ref}").tag(), image("{ref}").digest(),'
        f' image("{ref}").identifier()]'
    )
    assert got == [registry, repository, tag, digest, digest or tag]


@pytest.mark.parametrize(
    "ref",
    [
        "Nginx",  # upper case repository
        "nginx:bad/tag",
        f"nginx@{DIGEST[:-1]}",  # short digest
        "nginx@sha512:" + "a" * 128,  # only sha256 digests
        "a",  # repositories need two characters
        "https://ghcr.io/a/b",  # URL scheme
        "ghcr.io/a b",
        "",
    ],
)
def test_invalid_references(ref: str) -> None:
    assert value(f'isImage("{ref}")') is False
    message = error(f'parseImageReference("{ref}")')
    assert f"could not parse reference: {ref}" in message or "must not contain a URL scheme" in message


def test_invalid_reference_message() -> None:
    assert "could not parse reference: registry.k8s.io/kube-apiserver-arm64:@" in error(
        f'parseImageReference("{K8S}:@")'
    )


def test_is_image_rejects_non_strings_at_compile_time() -> None:
    with pytest.raises(RuntimeError, match="found no matching overload for 'isImage'"):
        environment().compile("isImage(0)")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("ghcr.io/org/app:1.25", ":1.25"),
        (f"ghcr.io/org/app@{DIGEST}", f"@{DIGEST}"),
        (f"ghcr.io/org/app:1.25@{DIGEST}", f":1.25@{DIGEST}"),
        ("nginx", ":latest"),
        ("nginx:1.25", ":1.25"),
    ],
)
def test_identifier_with_separator(ref: str, expected: str) -> None:
    assert value(f'image("{ref}").identifierWithSeparator()') == expected


def test_image_alias_and_equality() -> None:
    assert value('image("nginx") == parseImageReference("nginx")') is True
    # Kyverno compares parsed references including the original string.
    assert value('image("nginx") == image("docker.io/library/nginx:latest")') is False
    assert value('image("nginx").registry() == image("docker.io/library/nginx:latest").registry()') is True


def test_image_function_and_image_variable_coexist() -> None:
    # `image(...)` is the image library's function; `image.GetMetadata` the
    # imagedata library's variable. Both compile in one expression.
    outcome = run('image("nginx").registry() == "index.docker.io" && image.GetMetadata("nginx") != null')
    assert outcome.error is not None and "image.GetMetadata" in outcome.error


def test_documented_container_examples() -> None:
    pod = {"spec": {"containers": [{"image": "ghcr.io/a/b:1"}, {"image": f"ghcr.io/c/d@{DIGEST}"}]}}
    assert value('object.spec.containers.map(c, image(c.image)).map(i, i.registry()).all(r, r == "ghcr.io")', obj=pod) is True
    assert value("object.spec.containers.map(c, image(c.image)).all(i, i.containsDigest())", obj=pod) is False
