"""Differential test: our Kubernetes libraries against the real Kubernetes CEL environment.

``oracle/`` is a small Go program built on k8s.io/apiserver v0.37.2 that
evaluates expressions exactly as the kube-apiserver 1.37 does. Each file of
``oracle/cases`` (about 3,000 expressions: the godoc examples, Go's net/url,
netip, blang/semver and resource.Quantity corner cases, apimachinery
validations) is evaluated by both; results must agree: same value, or both
an error (same message where our messages are meant to match), or both
rejected at compile time.

Left out of the case files, because they are known deviations covered by
explicit tests: quantity ``isInteger/asInteger/asApproximateFloat`` (see the
library docstring), durations and timestamps (printed differently). IP parse
error texts differ (Python's reason), so ``network`` compares outcomes only.

Needs Go and the Kubernetes modules (from the module cache or the Go
proxy); skipped otherwise. The binary is cached outside the repository.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cel_expr_python import cel

from tests.unit.cel.kubernetes.conftest import BASE_DATA, policy_env

pytestmark = pytest.mark.slow

T = cel.Type
ORACLE = Path(__file__).parent / "oracle"
CASES = sorted((ORACLE / "cases").glob("*.txt"))
#: Case files whose error messages must match Kubernetes' word for word.
SAME_MESSAGES = {"urls", "quantity", "semver", "format", "lists", "comprehensions"}


@functools.cache
def oracle_binary() -> Path:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        pytest.skip("Go is not installed")
    digest = hashlib.sha256()
    for name in ("main.go", "go.mod", "go.sum"):
        digest.update((ORACLE / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vpol"
    binary = cache / f"k8scel-oracle-{digest.hexdigest()[:16]}"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(".partial")
        built = subprocess.run(
            [go, "build", "-o", str(partial), "."],
            cwd=ORACLE,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if built.returncode != 0:
            pytest.skip(f"cannot build the Kubernetes CEL oracle: {built.stderr[-500:]}")
        partial.rename(binary)
    return binary


def read_cases(path: Path) -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        expr, _, variables = line.partition("\t")
        cases.append((expr, json.loads(variables) if variables else {}))
    return cases


def kubernetes_outcomes(cases: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    lines = [json.dumps({"expr": e, "vars": v}) if v else e for e, v in cases]
    done = subprocess.run(
        [str(oracle_binary())], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def encode(v: Any) -> Any:
    """Our plain value in the oracle's JSON encoding."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"int": v}
    if isinstance(v, float):
        return {"double": v}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).decode("utf-8", "replace")}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, dict):
        return {"map": {(str(k).lower() if isinstance(k, bool) else str(k)): encode(x) for k, x in v.items()}}
    return {"opaque": True}


def decode(v: Any) -> Any:
    """The oracle's JSON with numbers made comparable to :func:`encode`'s."""
    if isinstance(v, list):
        return [decode(x) for x in v]
    if isinstance(v, dict):
        if "uint" in v:
            return {"int": v["uint"]}
        if "double" in v:
            return {"double": float(v["double"])}
        if "opaque" in v:
            return {"opaque": True}
        if "map" in v:
            return {"map": {k: decode(x) for k, x in v["map"].items()}}
        return {k: decode(x) for k, x in v.items()}
    return v


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict) and "double" in a and "double" in b:
        x, y = a["double"], b["double"]
        return (math.isnan(x) and math.isnan(y)) or x == y
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def our_outcome(expr: str, variables: dict[str, Any]) -> dict[str, Any]:
    env = policy_env()
    try:
        program = env.compile(expr)
    except RuntimeError as exc:
        if "net.CIDR" not in str(exc):
            return {"compile": str(exc)}
        # string(cidr) needs an unchecked AST here (see the library docstring)
        program = env.compile(expr, disable_check=True)
    result = program.eval(data={**BASE_DATA, **variables})
    if result.type() == T.ERROR:
        message = str(result.value())
        return {"error": message.split(": ", 1)[1] if message.split(": ", 1)[0].isupper() else message}
    return {"value": encode(result.plain_value())}


def disagreement(ours: dict[str, Any], theirs: dict[str, Any], messages: bool) -> str | None:
    if "value" in theirs:
        if "value" not in ours:
            return "Kubernetes gives a value"
        return None if same_value(ours["value"], decode(theirs["value"])) else "different values"
    if "error" in theirs:
        if "error" not in ours:
            return "Kubernetes gives an error"
        return "different messages" if messages and ours["error"] != theirs["error"] else None
    # A compile error: Kubernetes rejects bad regex literals when it builds
    # the program; we only see them when evaluating.
    if theirs["compile"].startswith("program:"):
        return None if "error" in ours else "Kubernetes rejects the program"
    return None if "compile" in ours else "Kubernetes rejects the expression"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_agrees_with_kubernetes(path: Path) -> None:
    cases = read_cases(path)
    theirs = kubernetes_outcomes(cases)
    assert len(theirs) == len(cases)
    problems = []
    for (expr, variables), expected in zip(cases, theirs):
        ours = our_outcome(expr, variables)
        why = disagreement(ours, expected, path.stem in SAME_MESSAGES)
        if why:
            problems.append(f"{why}: {expr} {variables or ''}\n  ours: {ours}\n  k8s:  {expected}")
    assert not problems, f"{len(problems)} of {len(cases)} disagree:\n" + "\n".join(problems[:20])
