"""No Python traceback reaches a user, whatever the input: a generated corpus of broken policy files.

From a real policy (every example's), files are made broken in each way a user (or a bad merge) breaks
them: truncated anywhere, control characters, every field replaced by a value of each wrong type,
huge and deeply nested expressions, duplicate and cyclic variables. `vpol check` over the whole corpus
must report every file (by name) and never raise; `vpol apply` must not raise either.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vpol.cli.main import main

REPO = Path(__file__).resolve().parents[3]
WRONG = [0, 1.5, True, None, "text", [], ["a", 1], {}, {"x": {"y": 1}}]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    if not path:
        return value
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _set_expression(doc: dict, expression: str) -> None:
    """Replace the first validation's (or, in a MutatingPolicy, the first mutation's) expression."""
    spec = doc["spec"]
    if spec.get("validations"):
        spec["validations"][0]["expression"] = expression
        return
    mutation = spec["mutations"][0]
    mutation["applyConfiguration" if "applyConfiguration" in mutation else "jsonPatch"]["expression"] = expression


def corpus(out: Path, seed: int = 7) -> list[Path]:
    rng = random.Random(seed)
    every = sorted((REPO / "examples").glob("**/policy.yaml"))
    mutating = [p for p in every if "/mutating/" in str(p)]
    # Validating and mutating policies both (the loop below takes the first six).
    sources = [p for p in every if p not in mutating][:4] + mutating[:2]
    files: list[Path] = []

    def emit(name: str, text: str | bytes) -> None:
        path = out / f"{len(files):04}-{name}.yaml"
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        files.append(path)

    for src in sources[:6]:
        text = src.read_text()
        doc = yaml.safe_load(text)
        for cut in sorted(rng.sample(range(1, len(text)), 8)):
            emit("truncated", text[:cut])
        for ch in ("\x00", "\x01", "\x1b", "\x7f", "\ufffe"):
            pos = rng.randrange(len(text))
            emit("control", text[:pos] + ch + text[pos:])
        paths = list(_paths(doc))
        for path in rng.sample(paths, min(25, len(paths))):
            emit("wrongtype", yaml.safe_dump(_replace(doc, path, rng.choice(WRONG))))
        spec = doc["spec"]
        huge = copy.deepcopy(doc)
        _set_expression(huge, " || ".join(["object.metadata.name == 'x'"] * 5000))
        emit("huge", yaml.safe_dump(huge))
        deep = copy.deepcopy(doc)
        _set_expression(deep, "(" * 300 + "true" + ")" * 300)
        emit("deep", yaml.safe_dump(deep))
        chained = copy.deepcopy(doc)
        _set_expression(chained, " + ".join(["1"] * 400) + " > 0")
        emit("chained", yaml.safe_dump(chained))
        dup = copy.deepcopy(doc)
        dup["spec"]["variables"] = [{"name": "a", "expression": "1"}, {"name": "a", "expression": "2"}]
        emit("duplicate-variables", yaml.safe_dump(dup))
        cyc = copy.deepcopy(doc)
        cyc["spec"]["variables"] = [{"name": "a", "expression": "variables.b"}, {"name": "b", "expression": "variables.a"}]
        emit("cyclic-variables", yaml.safe_dump(cyc))
        assert spec is not None
    emit("binary", bytes(range(256)) * 4)
    emit("empty", "")
    emit("scalar", "42\n")
    emit("list", "- a\n- b\n")
    return files


def test_check_reports_every_broken_file_and_never_raises(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    files = corpus(tmp_path)
    assert len(files) > 200
    code = main(["check", str(tmp_path)])  # a traceback would fail this test right here
    out = capsys.readouterr()
    text = out.out + out.err
    assert code in (1, 2), code
    assert "Traceback" not in text
    broken = [f for f in files if f.name.split("-", 1)[1] not in ("empty.yaml",)]
    silent = [f.name for f in broken if str(f) not in text]
    # a file may be broken in a way that leaves a valid policy (a truncation after the last field, a wrong
    # type where any type is fine): those are counted as valid, but most must be reported
    assert len(silent) < len(broken) // 4, silent


def test_apply_over_the_broken_corpus_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p").mkdir()
    files = corpus(tmp_path / "p")
    resources = tmp_path / "r.yaml"
    resources.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
                                         "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}))
    code = main(["apply", "--policy", *[str(f) for f in files[:120]], "--resource", str(resources),
                 "--no-progress", "--timeout", "5"])
    out = capsys.readouterr()
    assert code in (1, 2) and "Traceback" not in out.out + out.err
