"""vpol: check, apply, test and generate Kyverno's CEL policies offline, and run the operator.

Every kind: Validating, Mutating, Generating, Deleting and ImageValidating policies (namespaced ones too),
PolicyExceptions and GlobalContextEntries.

Exit codes: 0 success; 1 policy errors, failing results (``apply`` with
``--fail-on-violation``... see each command) or disagreeing tests; 2
unreadable input or bad usage.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import yaml

from vpol import __version__
from vpol.cli.context import build_backend, load_user_info, load_values
from vpol.cli.global_context import entries_in, entries_view, load_mock_files
from vpol.cli.inputs import Loaded, iter_resources, load_exceptions, load_policies, load_resources
from vpol.cli.progress import Progress
from vpol.cli.resolve import resolver
from vpol.model import documents
from vpol.model.documents import MAX_DOCUMENT_BYTES
from vpol.model.global_context import is_global_context_document
from vpol.model.problems import InputError, Problem
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.validating.model import ValidatingPolicy

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2


def _print_problems(problems: Sequence[Problem], stream: Any = None) -> None:
    stream = stream or sys.stderr
    for p in problems:
        print(p.render(), file=stream)


# --- check ---------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from vpol.policies.policy_validation import AnyPolicy, exception_problems, policy_problems

    loaded = load_policies(args.paths)
    # Everything `check` says (unreadable files, problems, the summary) goes to stdout, in that order.
    if loaded.unreadable:
        _print_problems(loaded.unreadable, sys.stdout)
    problems = list(loaded.problems)
    entries = _global_context_problems(args.paths)
    if not loaded.any_policy and not loaded.problems and not loaded.unreadable and not entries:
        _none_found(f"{POLICY_KINDS} or GlobalContextEntry", args.paths)
        return EXIT_FAIL
    policies: list[AnyPolicy] = [policy for of_kind in loaded.by_kind.values() for policy in of_kind]
    for policy in policies:
        problems.extend(policy_problems(policy, typecheck=not args.no_typecheck))
    for exc in loaded.exceptions:
        problems.extend(exception_problems(exc))
    problems.extend(p for found in entries for p in found)
    _print_problems(problems, sys.stdout)
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    invalid = {p.file + p.object for p in problems if p.severity == "error"}
    total = len(policies) + len(entries) + len({p.file + p.object for p in loaded.problems if p.severity == "error"})
    print(f"{total} {'policy' if total == 1 else 'policies'} checked: {total - len(invalid)} valid, "
          f"{len(invalid)} invalid ({errors} {'error' if errors == 1 else 'errors'}, "
          f"{warnings} {'warning' if warnings == 1 else 'warnings'})")
    if loaded.unreadable:
        return EXIT_INPUT
    if errors:
        return EXIT_FAIL
    if warnings and args.strict:
        print(f"--strict: {warnings} {'warning fails' if warnings == 1 else 'warnings fail'} the check",
              file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


#: The kinds of policy the CLI reads, as its messages name them.
POLICY_KINDS = "ValidatingPolicy, MutatingPolicy, GeneratingPolicy, DeletingPolicy, ImageValidatingPolicy (or a " \
               "namespaced one)"
#: Kyverno's policy kinds before its CEL policies (group kyverno.io), which vpol does not serve.
LEGACY_KINDS = ("ClusterPolicy", "Policy", "CleanupPolicy", "ClusterCleanupPolicy")


def _none_found(what: str, paths: Sequence[str]) -> None:
    """Say that ``paths`` hold no ``what``; and, for each of Kyverno's legacy policies among them, why it does not
    count."""
    from vpol.cli.inputs import expand, load_documents

    print(f"no {what} found in {' '.join(paths)}", file=sys.stderr)
    for path in expand(paths):
        try:
            docs = load_documents(path)
        except InputError:
            continue
        for doc in docs:
            data = doc.data if isinstance(doc.data, dict) else {}
            if data.get("kind") in LEGACY_KINDS and str(data.get("apiVersion", "")).startswith("kyverno.io/"):
                name = (data.get("metadata") or {}).get("name", "")
                print(f"{path}: {data['kind']}/{name} ({data['apiVersion']}) is one of Kyverno's legacy policy kinds, "
                      f"which vpol does not serve: vpol runs Kyverno's CEL policies (policies.kyverno.io: "
                      f"{POLICY_KINDS})", file=sys.stderr)


def _global_context_problems(paths: Sequence[str]) -> list[list[Problem]]:
    """The problems of every GlobalContextEntry among ``paths`` (Kyverno's rules), one list per entry; only files
    whose text names the kind are parsed again."""
    from vpol.cli.inputs import expand, load_documents, read_text
    from vpol.model.global_context import is_global_context_document, parse_global_context_entry

    out = []
    for path in expand(paths):
        try:
            if "GlobalContextEntry" not in read_text(path):
                continue
            docs = load_documents(path)
        except InputError:
            continue  # reported as unreadable already
        for doc in docs:
            if is_global_context_document(doc.data):
                out.append(parse_global_context_entry(doc.data, doc)[1])
    return out


# --- apply ---------------------------------------------------------------------------------


#: Resources sent to an evaluation worker in one round trip by `vpol apply`.
BATCH = 64


def cmd_apply(args: argparse.Namespace) -> int:
    import collections
    import concurrent.futures
    import queue

    from vpol.policies.validating.engine import PolicyEngine
    from vpol.engine.evaluate import Rendered, compile_exception
    from vpol.engine.request import Subject
    from vpol.policies.mutating.engine import MutatingPolicyEngine
    from vpol.policies.sandbox import Applied, Limits, SandboxedEvaluator
    from vpol.engine.subjects import subject_for

    loaded = load_policies(args.policy, Loaded(), strict_kinds=True)
    load_exceptions(args.exceptions or [], loaded)
    if loaded.unreadable:
        _print_problems(loaded.unreadable)
        return EXIT_INPUT
    if not loaded.any_policy and not loaded.has_errors:
        _none_found(POLICY_KINDS, args.policy)
        return EXIT_FAIL
    missing = [p for p in args.resource if p != "-" and not os.path.exists(p)]
    if missing:
        _print_problems([Problem("no such file or directory", file=p) for p in missing])
        return EXIT_INPUT
    _print_problems(loaded.problems)
    policy_problems = len(loaded.problems)
    try:
        values = load_values(args.values or [])
        user_info = load_user_info([args.userinfo] if args.userinfo else [])
        mocks, entries = load_mock_files(args.global_context or [])
        backend, extra = build_backend(context_files=args.context or [],
                                       cluster_resource_files=[*(args.cluster_resources or []),
                                                               *(args.target_resources or [])],
                                       global_context=mocks)
        entries += entries_in(args.resource)
    except InputError as exc:
        _print_problems([exc.problem])
        return EXIT_INPUT
    if entries:
        given = Loaded()
        objects = itertools.chain(backend.objects(), (d.data for d in iter_resources(args.resource, given)))
        backend.global_entries = entries_view([e for e, _file in entries], objects, backend.plural)
    resolve = resolver(extra)
    counts = dict.fromkeys(("pass", "fail", "warn", "error", "skip"), 0)
    # A row is a dict, or for a ValidatingPolicy's result the JSON text of its dict, made in the worker
    # (Result.rendered): pickling 100,000s of results back and rendering them here made this process the
    # bottleneck of a large input.
    rows: list[dict[str, Any] | str] = []
    patched: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (original, mutated) per mutated resource
    patched_rows: list[tuple[int, dict[str, Any]]] = []  # (row index, mutated resource) per mutating policy row
    progress = Progress(0, "evaluating", enabled=not args.no_progress)
    limits = Limits(seconds_per_subject=args.timeout, memory_bytes=args.memory_limit * 1024**2)
    count = 0
    #: The trigger subjects, kept only when target resources are given (mutateExisting needs every trigger) or
    #: GeneratingPolicies and DeletingPolicies are given.
    triggers: list[Subject] = []
    keep_triggers = bool(args.target_resources or loaded.generating or loaded.deleting or loaded.image_validating)
    target_rows: list[dict[str, Any]] = []
    # Resources stream: parsed, evaluated and dropped a batch at a time (memory bounded by the batch, not the
    # input). Each batch goes to a bounded worker in one round trip; with several workers (one per core by
    # default) batches are evaluated side by side and their results kept in input order.
    workers = max(1, args.workers)
    # Compiled once, here: compile errors are reported once and by file (an autogen variant's, when a
    # resource needs it, are the policy's results), and the workers, forked before this process starts any
    # thread, inherit the engines instead of importing and compiling their own.
    exceptions = [compile_exception(e) for e in loaded.exceptions]
    engines = [PolicyEngine(p, exceptions) for p in loaded.policies]
    mutating = [MutatingPolicyEngine(p, exceptions) for p in loaded.mutating]
    for engine in engines:
        _print_problems(engine.compiled.errors())
    for mutating_engine in mutating:
        _print_problems(mutating_engine.compiled.errors())
    for compiled_exc in exceptions:
        _print_problems(compiled_exc.problems)
    sys.stdout.flush()
    sys.stderr.flush()  # a forked worker must not write this process's buffered output again
    sandboxes = [SandboxedEvaluator(loaded.policies, loaded.exceptions, backend, limits, mutating=loaded.mutating,
                                    engines=(engines, mutating)) for _ in range(workers)]
    for sandbox in sandboxes:
        sandbox.start()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    pending: collections.deque[tuple[list[dict[str, Any]], concurrent.futures.Future[list[Applied]]]] = \
        collections.deque()
    idle: queue.Queue[SandboxedEvaluator] = queue.Queue()
    for sandbox in sandboxes:
        idle.put(sandbox)

    def run(batch: list[Subject]) -> list[Applied]:
        sandbox = idle.get()  # each worker serves one batch at a time
        try:
            # Mutations first, as in admission: validating policies see the mutated object.
            return sandbox.apply_many(batch, rendered=True)
        finally:
            idle.put(sandbox)

    def drain(keep: int) -> None:
        while len(pending) > keep:
            originals, future = pending.popleft()
            for original, (mutated, mutation_results, validated) in zip(originals, future.result()):
                for r in mutation_results:
                    counts[r.result] += 1
                    rows.append({**r.as_dict(), "mutated": r.properties.get("changed") == "true"})
                    # Each mutating policy's row carries the resource as all mutating policies left it.
                    patched_rows.append((len(rows) - 1, mutated or original))
                if mutation_results:
                    patched.append((original, mutated or original))
                for result, row in cast("list[Rendered]", validated):  # apply_many(rendered=True)
                    counts[result] += 1
                    rows.append(row)
                progress.step()

    def flush(batch: list[Subject], originals: list[dict[str, Any]]) -> None:
        pending.append((originals, pool.submit(run, list(batch))))
        drain(workers)

    try:
        batch: list[Subject] = []
        originals: list[dict[str, Any]] = []
        for doc in iter_resources(args.resource, loaded):
            if is_global_context_document(doc.data):
                continue  # an entry, not a resource to evaluate (Kyverno's CLI takes them out too)
            count += 1
            batch.append(subject_for(doc.data, operation=args.operation, resolve=resolve,
                                     namespaces=values.namespaces, user_info=user_info))
            if keep_triggers:
                triggers.append(batch[-1])
            originals.append(doc.data)
            if len(batch) >= BATCH:
                flush(batch, originals)
                batch, originals = [], []
        if batch:
            flush(batch, originals)
        drain(0)
        if args.target_resources:
            target_rows = _apply_targets(args, loaded, triggers, sandboxes[0], resolve, values)
        lifecycle = _apply_lifecycle(loaded, triggers, exceptions, backend, resolve)
        image_rows, images_ok = _apply_images(loaded, triggers, exceptions, args)
    finally:
        pool.shutdown(wait=True)
        for sandbox in sandboxes:
            sandbox.close()
    progress.done()
    _print_problems(loaded.problems[policy_problems:])
    if loaded.unreadable:
        _print_problems(loaded.unreadable)
    if not count and not loaded.has_errors:
        print(f"no resource found in {' '.join(args.resource)}", file=sys.stderr)
        return EXIT_INPUT if loaded.unreadable else EXIT_FAIL
    if patched and args.output == "table":
        _print_mutated(patched, diff=args.diff)
    if target_rows and args.output == "table":
        print("patched targets:")
        _print_mutated([(r.pop("original"), r["patchedResource"]) for r in target_rows if r["result"] == "pass"],
                       diff=args.diff)
    for r in target_rows:
        r.pop("original", None)
    rows.extend(target_rows)
    if lifecycle.generated and args.output == "table":
        print("generated:")
        yaml.safe_dump_all(lifecycle.generated, sys.stdout, sort_keys=False)
        print("---")
    rows.extend(lifecycle.rows)
    for row in lifecycle.rows:
        if not row.get("deletion"):
            counts[row["result"]] += 1
    rows.extend(image_rows)
    for row in image_rows:
        counts[row["result"]] += 1
    if args.output in ("json", "yaml"):
        for index, mutated_resource in patched_rows:
            mutating_row = rows[index]
            assert isinstance(mutating_row, dict)  # a MutatingPolicy's row
            mutating_row["patchedResource"] = mutated_resource
    if args.output == "json":
        # One row per line: json's C encoder (an indented dump runs the pure-Python one, seconds for 100k rows).
        sys.stdout.write("[\n" + ",\n".join("  " + (row if isinstance(row, str) else json.dumps(row))
                                              for row in rows) + ("\n]\n" if rows else "]\n"))
    else:
        dicts = [json.loads(row) if isinstance(row, str) else row for row in rows]
        if args.output == "yaml":
            yaml.safe_dump(dicts, sys.stdout, sort_keys=False)
        else:
            _table(dicts)
    kept = sum(1 for row in lifecycle.rows if row.get("deletion") and row["result"] == "fail")
    print(", ".join(f"{v} {k}" for k, v in counts.items()) +
          (f"; {lifecycle.deletions} to delete, {kept} kept" if loaded.deleting else ""), file=sys.stderr)
    if loaded.unreadable:
        return EXIT_INPUT
    if loaded.has_errors or any(not e.ok for e in engines) or not lifecycle.ok or not images_ok:
        return EXIT_FAIL
    return EXIT_FAIL if counts["fail"] or counts["error"] else EXIT_OK


def _apply_targets(args: argparse.Namespace, loaded: Loaded, triggers: list[Any], sandbox: Any, resolve: Any,
                   values: Any) -> list[dict[str, Any]]:
    """mutateExisting on ``--target-resource`` objects, as Kyverno's CLI does (vpol.policies.mutating.mutate_existing
    .offline_runs), in the bounded worker: a row per (policy, target) with ``target: true`` and the patched target;
    they do not count in the summary, as in Kyverno's CLI."""
    from vpol.policies.mutating.mutate_existing import offline_runs
    from vpol.engine.subjects import subject_for

    targets = load_resources(args.target_resources, Loaded())
    _print_problems(targets.unreadable)
    subjects = [subject_for(d.data, operation="UPDATE", resolve=resolve, namespaces=values.namespaces)
                for d in targets.resources]

    def mutate(policy: Any, target: Any) -> tuple[Any, dict[str, Any]]:
        ((result, patched),) = sandbox.mutate_targets(policy.key, [target])
        return result, patched

    runs = offline_runs(loaded.mutating, triggers, subjects,
                        resolve=lambda p, t: sandbox.resolve_targets(p.key, t, conditions=False), mutate=mutate)
    rows = []
    for policy, index, result, patched in runs:
        row = {**result.as_dict(), "target": True, "original": targets.resources[index].data}
        if result.result == "pass":
            row["patchedResource"] = patched
        rows.append(row)
    return rows


@dataclass
class _Lifecycle:
    """What `vpol apply` found for the GeneratingPolicies and DeletingPolicies."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Every object the GeneratingPolicies would write, as vpol's operator would write it.
    generated: list[dict[str, Any]] = field(default_factory=list)
    deletions: int = 0
    ok: bool = True


def _apply_images(loaded: Loaded, subjects: list[Any], exceptions: list[Any],
                  args: argparse.Namespace) -> tuple[list[dict[str, Any]], bool]:
    """ImageValidatingPolicies over the resources (in this process): a row per (policy, resource) it applies to,
    the images read from their registries (credentials: ``--registry-credentials``), verifications cached for the
    run; ``validationConfigurations.required`` decided across the policies of each resource, as at admission."""
    import time

    from vpol.policies.image_validating.engine import ImagePolicyEngine, apply_required
    from vpol.engine.image_verification import Outcomes, VerificationCache
    from vpol.oci.registry import Credentials, RegistryClient

    if not loaded.image_validating:
        return [], True
    engines = [ImagePolicyEngine(p, exceptions) for p in loaded.image_validating]
    ok = True
    for engine in engines:
        _print_problems(engine.compiled.errors())
        ok = ok and engine.ok
    configs = []
    for path in args.registry_credentials or []:
        try:
            with open(path, encoding="utf-8") as f:
                configs.append(json.load(f))
        except (OSError, ValueError) as exc:
            _print_problems([Problem(f"cannot read registry credentials: {exc}", file=path)])
            return [], False
    registry = RegistryClient(Credentials(configs), timeout=args.registry_timeout)
    cache = VerificationCache()
    rows: list[dict[str, Any]] = []
    for subject in subjects:
        verified = Outcomes()
        loaded_images: dict[str, Any] = {}
        outcomes = [o for e in engines if (o := e.evaluate(
            subject, registry=registry, outcomes=verified, cache=cache, loaded=loaded_images,
            deadline=time.monotonic() + args.registry_timeout * 6)) is not None]
        apply_required(outcomes, verified)
        rows.extend(o.result.as_dict() for o in outcomes)
    return rows, ok


def _apply_lifecycle(loaded: Loaded, triggers: list[Any], exceptions: list[Any], backend: Any,
                     resolve: Any) -> _Lifecycle:
    """GeneratingPolicies and DeletingPolicies over the resources (in this process, as the operator would run
    them): a row per (GeneratingPolicy, trigger) with the objects it would generate (``generatedResources``: the
    objects with the labels vpol's operator writes), and a row per (DeletingPolicy, resource) it selects with
    ``deletion: true``, ``pass`` for a resource it would delete and ``fail`` for one it keeps (these do not count
    in the summary: keeping a resource is no failure; an error does)."""
    from vpol.cel.backend import using
    from vpol.policies.deleting.engine import DeletingPolicyEngine
    from vpol.policies.generating.engine import GeneratingPolicyEngine, labelled

    out = _Lifecycle()
    if not loaded.generating and not loaded.deleting:
        return out

    def scope(api_version: str, kind: str) -> bool | None:
        known = resolve(api_version, kind)
        return None if known is None else known.namespaced

    generating = [GeneratingPolicyEngine(p, exceptions, namespaced=scope) for p in loaded.generating]
    deleting = [DeletingPolicyEngine(p, exceptions) for p in loaded.deleting]
    for compiled in [*(g.compiled for g in generating), *(d.compiled for d in deleting)]:
        _print_problems(compiled.errors())
        out.ok = out.ok and compiled.ok
    with using(backend):
        for trigger in triggers:
            for gpol in generating:
                generation = gpol.generate(trigger)
                if generation is None:
                    continue
                objects = [labelled(d, gpol.policy, trigger) for d in generation.downstreams]
                out.generated += objects
                out.rows.append({**generation.result.as_dict(), "generatedResources": objects})
            for dpol in deleting:
                verdict = dpol.evaluate(trigger)
                if verdict is None:
                    continue
                out.deletions += verdict.result == "pass"
                out.ok = out.ok and verdict.result != "error"
                out.rows.append({**verdict.as_dict(), "deletion": True})
    return out


def _print_mutated(patched: list[tuple[dict[str, Any], dict[str, Any]]], *, diff: bool) -> None:
    """The mutated resources as a YAML stream, or as unified diffs against the input (``--diff``)."""
    import difflib

    if not diff:
        yaml.safe_dump_all([m for _o, m in patched], sys.stdout, sort_keys=False)
        print("---")
        return
    for original, mutated in patched:
        meta = original.get("metadata") or {}
        name = "/".join(x for x in (original.get("kind"), meta.get("namespace"), meta.get("name")) if x)
        before = yaml.safe_dump(original, sort_keys=False).splitlines(keepends=True)
        after = yaml.safe_dump(mutated, sort_keys=False).splitlines(keepends=True)
        sys.stdout.writelines(difflib.unified_diff(before, after, f"{name} (input)", f"{name} (mutated)"))


#: What the table says for a DeletingPolicy's result on an object.
DELETION_WORDS = {"pass": "delete", "fail": "keep"}


def _table(rows: list[dict[str, Any]]) -> None:
    headers = ["POLICY", "RESOURCE", "RESULT", "MESSAGE"]
    lines = []
    for r in rows:
        res = "/".join(x for x in (r["kind"], r["namespace"], r["name"]) if x)
        # A DeletingPolicy's rows say what it would do (their JSON result stays Kyverno's pass/fail).
        result = DELETION_WORDS.get(r["result"], r["result"]) if r.get("deletion") else r["result"]
        lines.append([r["policy"], res, result.upper(), r["message"].replace("\n", " ")])
    widths = [max([len(h)] + [len(line[i]) for line in lines]) for i, h in enumerate(headers[:-1])]
    print("  ".join(h.ljust(w) for h, w in zip(headers[:-1], widths)) + "  " + headers[-1])
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths)) + "  " + line[-1])


# --- test ----------------------------------------------------------------------------------


def cmd_test(args: argparse.Namespace) -> int:
    from vpol.cli.kyverno_test import find_test_files, run_tests

    missing = [p for p in args.paths if not os.path.exists(p)]
    if missing:
        print(f"no such file or directory: {' '.join(missing)}", file=sys.stderr)
        return EXIT_INPUT
    if not find_test_files(args.paths):
        print(f"no kyverno-test.yaml found under: {' '.join(args.paths)}", file=sys.stderr)
        return EXIT_INPUT
    outcomes = run_tests(args.paths)
    agreed = disagreed = unsupported = 0
    failed_tests = 0
    for o in outcomes:
        status = "UNSUPPORTED" if o.unsupported else ("OK" if all(c.ok for c in o.checks) and not o.problems
                                                       else "FAILED")
        print(f"{status:<11} {o.file} ({o.name})")
        for p in o.problems:
            print("    " + p.render().replace("\n", "\n    "))
        for c in o.checks:
            if c.status == "not checked":
                if args.verbose:
                    print(f"    not checked {c.policy} {c.kind} {c.resource}: {c.message}")
                continue
            if c.status == "unsupported":
                unsupported += 1
                if args.verbose:
                    print(f"    unsupported  {c.policy} {c.kind} {c.resource}: {c.message}")
                continue
            mark = "agree" if c.ok else "DISAGREE"
            agreed += c.ok
            disagreed += not c.ok
            if args.verbose or not c.ok:
                print(f"    {mark:<9} {c.policy} {c.kind or '-'} {c.resource}: expected {c.expected}, "
                      f"got {c.actual or '-'} ({c.message})")
        if status == "FAILED":
            failed_tests += 1
    print(f"{agreed} agreed, {disagreed} disagreed, {unsupported} unsupported "
          f"({len(outcomes)} tests, {failed_tests} failed)")
    return EXIT_FAIL if disagreed or failed_tests else EXIT_OK


# --- generate ------------------------------------------------------------------------------


def cmd_generate_vap(args: argparse.Namespace) -> int:
    from vpol.policies.validating.vap import desired_objects

    return _generate(args.policies, "ValidatingPolicy", lambda loaded: loaded.policies,
                     lambda policy, loaded: desired_objects(policy, exceptions=loaded.exceptions, force=True))


def cmd_generate_map(args: argparse.Namespace) -> int:
    from vpol.policies.mutating.map import desired_map_objects

    return _generate(args.policies, "MutatingPolicy", lambda loaded: loaded.mutating,
                     lambda policy, loaded: desired_map_objects(policy, exceptions=loaded.exceptions, force=True))


def _generate(paths: list[str], kind: str, select: Any, build: Any) -> int:
    """Print the native admission objects ``build`` makes of every policy ``select`` picks from ``paths``."""
    loaded = load_policies(paths)
    if loaded.unreadable:
        _print_problems(loaded.unreadable)
        return EXIT_INPUT
    _print_problems(loaded.problems)
    policies = select(loaded)
    if not policies and not loaded.has_errors:
        print(f"no {kind} found in {' '.join(paths)}", file=sys.stderr)
        return EXIT_FAIL
    docs: list[dict[str, Any]] = []
    failed = False
    for policy in policies:
        plan = build(policy, loaded)
        if plan.reason:
            print(f"{policy.ref}: {plan.reason}", file=sys.stderr)
            failed = failed or not plan.objects
        docs.extend(plan.objects)
    yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
    return EXIT_FAIL if failed or loaded.has_errors else EXIT_OK


# --- run -----------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from vpol.controller.run import run
    from vpol.controller.runtime import Options

    if args.reload:
        from vpol.cli.reload import watch_and_restart

        watch_and_restart()

    run(Options(kubeconfig=args.kubeconfig, context=args.context, metrics_port=args.metrics_port,
                liveness_port=args.liveness_port, peering=args.peering, priority=args.priority,
                workers=args.workers, resync=args.resync, scan_interval=args.scan_interval,
                namespace=args.namespace, http_allow=tuple(args.http_allow or ()), eval_timeout=args.eval_timeout,
                eval_memory_mib=args.eval_memory_limit, vap_generation=args.vap_generation,
                webhook=args.webhook == "on", webhook_port=args.webhook_port, webhook_url=args.webhook_url,
                webhook_service=args.webhook_service, webhook_timeout=args.webhook_timeout,
                webhook_cert_secret=args.webhook_cert_secret, webhook_workers=args.webhook_workers,
                webhook_client_ca=args.webhook_client_ca,
                webhook_eval_timeout=args.webhook_eval_timeout, webhook_drain=args.webhook_drain,
                webhook_excluded_namespaces=tuple(args.webhook_exclude_namespaces or ()),
                webhook_inline=args.webhook_inline == "on",
                policy_validation=args.policy_validation == "on",
                events=args.events == "on", events_per_second=args.events_per_second,
                mutate_existing_writes_per_second=args.mutate_existing_writes_per_second,
                generation_writes_per_second=args.generation_writes_per_second,
                deletions_per_second=args.deletions_per_second,
                owner_cluster_role=args.owner_clusterrole,
                global_context_max_objects=args.global_context_max_objects,
                global_context_max_bytes=args.global_context_max_bytes,
                global_context_call_timeout=args.global_context_call_timeout))
    return EXIT_OK


# --- parser --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vpol", description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--version", action="version", version=f"vpol {__version__}", help="print the version")
    sub = parser.add_subparsers(dest="command", required=True)
    inputs = argparse.ArgumentParser(add_help=False)
    inputs.add_argument("--max-input-mib", type=float, default=MAX_DOCUMENT_BYTES / 1024**2, metavar="MIB",
                        help=f"largest input file read (default {MAX_DOCUMENT_BYTES // 1024**2}); larger files are "
                             "reported as unreadable")

    p = sub.add_parser("check", help="compile and type-check policies", parents=[inputs])
    p.add_argument("paths", nargs="+", metavar="PATH", help="policy files or directories")
    p.add_argument("--no-typecheck", action="store_true", help="skip schema-aware type checking")
    p.add_argument("--strict", action="store_true",
                   help="warnings fail the check too (exit 1), the type checker's findings among them: the CI gate")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("apply", help="evaluate policies against resources offline", parents=[inputs])
    p.add_argument("--policy", "-p", nargs="+", action="extend", required=True, metavar="PATH",
                   help="policy files or directories (policies of every kind, PolicyExceptions); repeatable")
    p.add_argument("--resource", "-r", nargs="+", action="extend", required=True, metavar="PATH",
                   help="resource files or directories (kind: List is flattened); repeatable")
    p.add_argument("--exceptions", "-e", nargs="+", action="extend", metavar="PATH",
                   help="PolicyException files or directories; repeatable")
    p.add_argument("--values", "-f", nargs="+", action="extend", metavar="FILE", help="Kyverno CLI values file")
    p.add_argument("--context", nargs="+", action="extend", metavar="FILE", help="Kyverno CLI context file")
    p.add_argument("--cluster-resources", nargs="+", action="extend", metavar="PATH", help="objects standing in for the cluster")
    p.add_argument("--target-resource", "--target-resources", dest="target_resources", nargs="+", action="extend",
                   metavar="PATH", help="existing objects the MutatingPolicies with mutateExisting change (Kyverno's "
                                        "targets; they stand in for the cluster too)")
    p.add_argument("--global-context", nargs="+", action="extend", metavar="FILE",
                   help="GlobalContextEntry data for globalContext.Get: a globalContextEntries list as in a Kyverno "
                        "CLI test file, or GlobalContextEntry objects (kubernetesResource entries hold the given "
                        "resources of their kind; GlobalContextEntry objects among --resource files count too)")
    p.add_argument("--registry-credentials", nargs="+", action="extend", metavar="FILE",
                   help="Docker config JSON files (as image pull Secrets hold) with credentials for the registries "
                        "ImageValidatingPolicies read")
    p.add_argument("--registry-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="how long one registry request may take (ImageValidatingPolicies)")
    p.add_argument("--userinfo", "-u", metavar="FILE",
                   help="the requesting user (request.userInfo): a Kyverno CLI user-info file (kind UserInfo)")
    p.add_argument("--operation", default="CREATE", choices=["CREATE", "UPDATE", "DELETE", "CONNECT"],
                   help="the admission operation the resources are evaluated for (request.operation; default CREATE)")
    p.add_argument("-o", "--output", default="table", choices=["table", "json", "yaml"],
                   help="table (default: mutated resources as YAML, then the results), json or yaml (result rows; "
                        "a mutating policy's row carries patchedResource)")
    p.add_argument("--diff", action="store_true",
                   help="with mutating policies: print each mutated resource as a unified diff against the input")
    p.add_argument("--no-progress", action="store_true", help="never show a progress line")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="longest evaluation time per resource (all policies); beyond it the policy errors")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), metavar="N",
                   help="evaluation worker processes, each bounded by --timeout and --memory-limit "
                        "(default: one per core, at most 4)")
    p.add_argument("--memory-limit", type=int, default=2048, metavar="MIB",
                   help="address-space cap of the evaluation worker")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("test", help="run Kyverno CLI test files (kyverno-test.yaml)", parents=[inputs],
                       description="Exit codes: 0 every expectation agrees, 1 a disagreement or a test that "
                                   "cannot run, 2 a path is missing or holds no test file.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="test files, or directories searched for kyverno-test.yaml (hidden folders included)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every expectation")
    p.set_defaults(func=cmd_test)

    p = sub.add_parser("run", help="run the operator against the current kubeconfig (cluster-wide)")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--metrics-port", type=int, default=8080, help="port of /metrics (default 8080)")
    p.add_argument("--liveness-port", type=int, default=8081, help="port of /healthz (default 8081)")
    p.add_argument("--peering", default="", metavar="NAME",
                   help="Kopf peering name for running several replicas (default: standalone)")
    p.add_argument("--priority", type=int, default=None,
                   help="peering priority: the highest one handles policy events (default: drawn at random, "
                        "so that replicas never share it: Kopf pauses every replica sharing the highest)")
    p.add_argument("--workers", type=int, default=2, help="concurrent policy reconciles")
    p.add_argument("--resync", type=float, default=600.0, metavar="SECONDS",
                   help="period of full re-reconciles of every policy")
    p.add_argument("--scan-interval", type=float, default=3600.0, metavar="SECONDS",
                   help="period of full background rescans; changed resources are rescanned at once "
                        "(0 disables background scans)")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "vpol-system"),
                   help="the operator's namespace (holds the scanner Lease)")
    p.add_argument("--http-allow", nargs="*", metavar="URL_PREFIX",
                   help="let http.Get/Post in policies reach URLs under these prefixes (default: none)")
    p.add_argument("--eval-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="background evaluation deadline per resource")
    p.add_argument("--eval-memory-limit", type=int, default=1024, metavar="MIB",
                   help="address-space cap of the background evaluation worker")
    p.add_argument("--vap-generation", choices=["eligible", "opt-in"], default="eligible",
                   help="eligible (default): every policy the API server can enforce natively gets its "
                        "ValidatingAdmissionPolicies unless it sets spec.autogen.validatingAdmissionPolicy.enabled: "
                        "false; opt-in: only policies that set it true (Kyverno's behaviour)")
    p.add_argument("--webhook", choices=["on", "off"], default="on",
                   help="run vpol's admission webhook for the policies not enforced natively (default on)")
    p.add_argument("--webhook-port", type=int, default=9443, help="HTTPS port of the webhook (default 9443)")
    p.add_argument("--webhook-url", default="", metavar="URL",
                   help="development and tests: the API server calls this URL (e.g. https://127.0.0.1:9443) "
                        "instead of the Service")
    p.add_argument("--webhook-service", default="vpol-webhook",
                   help="the Service in front of the webhook, in --namespace (default vpol-webhook)")
    p.add_argument("--webhook-timeout", type=int, default=10, metavar="SECONDS",
                   help="timeoutSeconds of the webhooks (1-30, default 10)")
    p.add_argument("--webhook-cert-secret", default="", metavar="NAME",
                   help="an existing kubernetes.io/tls Secret in --namespace with ca.crt (e.g. from cert-manager); "
                        "default: vpol makes and rotates its own in vpol-webhook-tls")
    p.add_argument("--webhook-client-ca", default="", metavar="FILE",
                   help="a CA certificate file: the webhook accepts only clients presenting a certificate it signed "
                        "(the API server's, configured through its AdmissionConfiguration); default: none required")
    p.add_argument("--webhook-workers", type=int, default=2,
                   help="evaluation worker processes of the webhook (default 2)")
    p.add_argument("--webhook-eval-timeout", type=float, default=3.0, metavar="SECONDS",
                   help="longest evaluation of one admission request; beyond it the failurePolicy answers")
    p.add_argument("--webhook-drain", type=float, default=5.0, metavar="SECONDS",
                   help="on shutdown, keep answering admission requests for this long, each answer closing its "
                        "connection, so that the API server moves to the other replicas without a failed request "
                        "(default 5; not with --webhook-url)")
    p.add_argument("--webhook-exclude-namespaces", nargs="+", metavar="NAMESPACE",
                   help="namespaces vpol's webhooks never match (the API server does not call them for requests "
                        "there), besides kube-system and --namespace, which are always left out")
    p.add_argument("--webhook-inline", choices=["on", "off"], default="on",
                   help="answer requests whose work is bounded before it starts (vpol.cel.cost) in the serving "
                        "process (default on; off: every request is evaluated by a worker process)")
    p.add_argument("--policy-validation", choices=["on", "off"], default="on",
                   help="refuse invalid policies at apply time through the webhook (failurePolicy Ignore; default "
                        "on; off: they are admitted and reported in status only)")
    p.add_argument("--events", choices=["on", "off"], default="on",
                   help="PolicyViolation Events for failing admission requests and background results (default on)")
    p.add_argument("--events-per-second", type=float, default=5.0, metavar="N",
                   help="most Events sent per second (bursts of 10 times that; beyond a queue of 1000 they are "
                        "dropped and counted); default 5")
    p.add_argument("--mutate-existing-writes-per-second", type=float, default=50.0, metavar="N",
                   help="most writes per second of MutatingPolicies' mutation of existing objects (default 50)")
    p.add_argument("--generation-writes-per-second", type=float, default=50.0, metavar="N",
                   help="most writes per second of objects GeneratingPolicies generate (default 50)")
    p.add_argument("--deletions-per-second", type=float, default=50.0, metavar="N",
                   help="most deletions per second of DeletingPolicies (default 50)")
    p.add_argument("--owner-clusterrole", default="", metavar="NAME",
                   help="the installation's ClusterRole (the manifests and the Helm chart give theirs): it owns the "
                        "webhook configurations, so uninstalling vpol garbage-collects them (default: no owner)")
    p.add_argument("--global-context-max-objects", type=int, default=10_000, metavar="N",
                   help="most objects one GlobalContextEntry (kubernetesResource) may hold; beyond it the entry "
                        "serves an error saying so (default 10000)")
    p.add_argument("--global-context-max-bytes", type=int, default=10_000_000, metavar="BYTES",
                   help="most bytes one GlobalContextEntry may hold (its objects as JSON, or an API call's answer; "
                        "default 10000000, Kyverno's maxAPICallResponseLength)")
    p.add_argument("--global-context-call-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="timeout of one GlobalContextEntry API call (default 30, Kyverno's apiCallTimeout)")
    p.add_argument("--reload", action="store_true", help="development: restart when a source file changes")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("generate", help="print generated objects")
    gen = p.add_subparsers(dest="what", required=True)
    g = gen.add_parser("vap", help="the ValidatingAdmissionPolicy and binding for policies", parents=[inputs])
    g.add_argument("policies", nargs="+", metavar="POLICY", help="ValidatingPolicy files or directories")
    g.set_defaults(func=cmd_generate_vap)
    g = gen.add_parser("map", help="the MutatingAdmissionPolicy and binding for MutatingPolicies", parents=[inputs])
    g.add_argument("policies", nargs="+", metavar="POLICY", help="MutatingPolicy files or directories")
    g.set_defaults(func=cmd_generate_map)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "max_input_mib", None):
        documents.MAX_DOCUMENT_BYTES = int(args.max_input_mib * 1024**2)
    try:
        return int(args.func(args))
    except InputError as exc:
        _print_problems([exc.problem])
        return EXIT_INPUT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
