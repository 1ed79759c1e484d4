"""What the generators of derived CRDs (generate-namespaced.py, generate-mutating.py) share: each derives
its CRD from validatingpolicies.yaml beside it, then writes it, or with ``--check`` says whether the file
on disk is what it would write."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

SOURCE = Path(__file__).resolve().parent / "validatingpolicies.yaml"


def render(derive: Callable[[dict[str, Any]], dict[str, Any]], header: str) -> str:
    (source,) = [d for d in yaml.safe_load_all(SOURCE.read_text()) if d]
    return header + "---\n" + yaml.safe_dump(derive(source), sort_keys=False, width=120)


def main(derive: Callable[[dict[str, Any]], dict[str, Any]], target: Path, header: str, script: str) -> int:
    text = render(derive, header)
    if sys.argv[1:] == ["--check"]:
        if target.read_text() != text:
            print(f"{target} is out of date: run {Path(script).name}", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0
