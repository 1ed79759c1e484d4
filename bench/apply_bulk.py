"""Benchmark of offline `vpol apply` on a large input (not a test): wall time and peak memory.

Generates N Pods (default 10,000; a mix of compliant and violating ones) in one
multi-document YAML file, applies every Pod Security Standard policy of
examples/pod-security (the first 16) with `vpol apply -o json`, and reports
wall time, evaluations per second and the peak RSS of the CLI process and of
its evaluation workers (each measured by the kernel: ru_maxrss of the process
and of its waited children). Also, in the same run, a plain evaluator on the
same CEL library (compile each policy once, evaluate every Pod in-process,
no positions, no sandbox), as the reference the issue compares with.

Run: ``python3 bench/apply_bulk.py [--pods 10000] [--workers N]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def pods(n: int) -> list[dict]:
    out = []
    for i in range(n):
        container = {"name": "app", "image": f"registry.example.com/app:{i % 7}.0",
                     "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]},
                                         "seccompProfile": {"type": "RuntimeDefault"}}}
        if i % 5 == 0:
            container["securityContext"]["privileged"] = True
        out.append({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"p{i}", "namespace": f"ns{i % 10}", "labels": {"app": "x"}},
                    "spec": {"containers": [container], "hostNetwork": i % 11 == 0}})
    return out


def plain_evaluator(policy_files: list[Path], resource_file: Path) -> tuple[float, int]:
    """Compile once, evaluate everything in-process with cel-expr-python directly: (seconds, evaluations)."""
    sys.path.insert(0, str(REPO / "operator"))
    from vpol.cel.environment import EnvSpec, environment

    env = environment(EnvSpec())
    started = time.perf_counter()
    programs = []
    for f in policy_files:
        doc = yaml.safe_load(f.read_text())
        spec = doc["spec"]
        variables = [(v["name"], env.compile(v["expression"])) for v in spec.get("variables") or []]
        checks = [env.compile(v["expression"]) for v in spec.get("validations") or []]
        conditions = [env.compile(c["expression"]) for c in spec.get("matchConditions") or []]
        programs.append((variables, conditions, checks))
    count = 0
    for obj in yaml.load_all(resource_file.read_text(), Loader=yaml.CSafeLoader):
        base = {"object": obj, "oldObject": None, "request": {}, "namespaceObject": None, "variables": {}}
        for variables, conditions, checks in programs:
            data = dict(base)
            values: dict = {}
            for name, prog in variables:
                values[name] = prog.eval(env.Activation(data={**data, "variables": values})).plain_value()
            act = env.Activation(data={**data, "variables": values})
            if all(c.eval(act).plain_value() is True for c in conditions):
                for check in checks:
                    check.eval(act)
            count += 1
    return time.perf_counter() - started, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=0, help="vpol apply --workers (default: its own default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        resource_file = Path(tmp) / "pods.yaml"
        resource_file.write_text(yaml.safe_dump_all(pods(args.pods)))
        policy_files = sorted((REPO / "examples" / "pod-security").glob("*/*/policy.yaml"))[:16]
        policies = Path(tmp) / "policies"
        policies.mkdir()
        for f in policy_files:
            (policies / f"{f.parent.name}.yaml").write_text(f.read_text())
        cmd = [sys.executable, "-m", "vpol.cli.main", "apply", "-p", str(policies), "-r", str(resource_file),
               "-o", "json", "--no-progress"] + (["--workers", str(args.workers)] if args.workers else [])
        env = dict(os.environ, PYTHONPATH=str(REPO / "operator"))
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        rows = proc.stdout.count('"policy"')
        plain_seconds, plain_count = plain_evaluator(policy_files, resource_file)
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
              f"load {os.getloadavg()[0]:.2f}")
        print(f"input: {args.pods} Pods ({resource_file.stat().st_size / 1024**2:.1f} MiB), "
              f"{len(policy_files)} policies; exit {proc.returncode}; {proc.stderr.strip().splitlines()[-1]}")
        print(f"vpol apply -o json: {elapsed:.2f} s wall, {rows} results, {rows / elapsed:,.0f} results/s, "
              f"peak RSS of the largest process {children:.0f} MiB")
        print(f"plain evaluator (same CEL library, in-process, no positions/sandbox): {plain_seconds:.2f} s for "
              f"{plain_count} policy x Pod pairs")
        print(f"ratio vpol / plain: {elapsed / plain_seconds:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
