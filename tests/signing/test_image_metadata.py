"""``image.GetMetadata`` against Kyverno's own answer: the same images in a real registry read by vpol
(vpol.engine.image_metadata over vpol.oci) and by Kyverno's image data loader (the oracle's ``imageData`` mode,
tests/kyverno/imagedata.go), compared whole: a tag, a digest, a tag and digest together, an image index, and
references the registry does not have."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.differential.test_kyverno import oracle
from tests.signing.tools import RegistryProcess, Signer, tools
from vpol.engine.image_metadata import image_metadata
from vpol.engine.registry_access import RegistryError
from vpol.oci.registry import RegistryClient


def kyverno_answers(images: list[str]) -> dict[str, Any]:
    proc = subprocess.run([oracle()], input=json.dumps({"imageData": images}), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout)["imageData"])


def vpol_answer(image: str) -> dict[str, Any]:
    try:
        return {"data": image_metadata(RegistryClient(timeout=10), image)}
    except RegistryError as exc:
        return {"error": str(exc)}


@pytest.fixture(scope="module")
def images(registry: RegistryProcess, signer: Signer) -> list[str]:
    host = registry.host
    digest = signer.push_image(host, "meta/app", "v1")
    other = signer.push_image(host, "meta/app", "v2")
    # An index of two platform images (the loader picks linux/amd64).
    for tag, platform in (("amd64", "linux/amd64"), ("arm64", "linux/arm64")):
        subprocess.run([tools().crane, "mutate", "--set-platform", platform, "-t", f"{host}/meta/multi:{tag}",
                        f"{host}/meta/app:{'v1' if tag == 'amd64' else 'v2'}"], check=True, capture_output=True,
                       timeout=60)
    subprocess.run([tools().crane, "index", "append", "-m", f"{host}/meta/multi:amd64", "-m",
                    f"{host}/meta/multi:arm64", "-t", f"{host}/meta/multi:v1"], check=True, capture_output=True,
                   timeout=60)
    return [f"{host}/meta/app:v1", f"{host}/meta/app@{digest}", f"{host}/meta/app:v2@{other}",
            f"{host}/meta/multi:v1", f"{host}/meta/app:missing"]


def test_vpol_answers_what_kyverno_answers(images: list[str]) -> None:
    kyverno = kyverno_answers(images)
    for image in images:
        theirs, ours = kyverno[image], vpol_answer(image)
        if "error" in theirs:
            assert "error" in ours, (image, ours)
            continue
        assert ours == theirs, image
    # The cases mean what they say: a tag resolved, an index read, a missing tag an error.
    assert kyverno[images[0]]["data"]["tag"] == "v1" and "imageIndex" in kyverno[images[3]]["data"]
    assert "error" in kyverno[images[4]]
