"""Fixtures of the image verification tests: the test registry and a cosign signer (tests/signing/tools.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.signing.tools import RegistryProcess, Signer


@pytest.fixture(scope="session")
def registry() -> Iterator[RegistryProcess]:
    proc = RegistryProcess().start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return Signer(Path(tmp_path_factory.mktemp("cosign-home")))


@pytest.fixture(scope="session")
def keys(signer: Signer) -> dict[str, tuple[Path, str]]:
    """Two cosign key pairs: ``trusted`` (the policies' key) and ``other``."""
    return {name: signer.key_pair(name) for name in ("trusted", "other")}
