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


Output = tuple[Callable[[dict[str, Any]], dict[str, Any]], Path, str]


def main(derive: Callable[[dict[str, Any]], dict[str, Any]], target: Path, header: str, script: str,
         more: tuple[Output, ...] = ()) -> int:
    """Write (or ``--check``) ``target`` and every further (derive, target, header) of ``more``."""
    stale = 0
    for each_derive, each_target, each_header in ((derive, target, header), *more):
        text = render(each_derive, each_header)
        if sys.argv[1:] == ["--check"]:
            if not each_target.exists() or each_target.read_text() != text:
                print(f"{each_target} is out of date: run {Path(script).name}", file=sys.stderr)
                stale += 1
            continue
        each_target.write_text(text)
    return 1 if stale else 0
