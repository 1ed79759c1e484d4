"""GlobalContextEntry data offline: a Kyverno CLI test's ``globalContextEntries``, and entries given as objects.

**Mocked entries** (``vpol test``; ``vpol apply --global-context FILE``). Kyverno's CLI (1.19) reads them
from the test file's ``globalContextEntries`` list (cmd/cli/kubectl-kyverno/apis/v1alpha1/test.go), each:

* ``name`` (required, unique);
* exactly one source: ``data`` (a JSON object), ``resources`` (inline objects) or ``resourceFiles`` (YAML
  files, relative to the test file's folder, multi-document, never absolute nor escaping the folder);
* ``fieldPath``: a JMESPath applied to the data (or the list of resources) first;
* ``projections`` [{name, path}]: when given, the entry's data is the object {name: JMESPath result}.

Everything is decoded as Go decodes JSON (every number a float64) and the JMESPath evaluated as Kyverno's is
(vpol.cel.go_jmespath). A policy then reads ``globalContext.Get(name, "")`` (the data) or ``Get(name, key)``
(a key of that data, an error when it is missing or the data is not an object); an unknown entry is null.
Invalid entries stop the test with Kyverno's message.

**GlobalContextEntry objects** (``vpol apply``: in ``--global-context`` files, or among ``--resource`` files,
which then pass them over as Kyverno's CLI does): a kubernetesResource entry holds the given objects of its
resource (``--resource``, ``--cluster-resources`` and context files), served as in a cluster
(vpol.cel.global_context). An apiCall entry cannot be called offline: reading it is an error saying so.
(Kyverno's ``apply`` reads such objects only for its older policy kinds: its CEL policies see null.)
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from vpol.cel import go_jmespath
from vpol.cel.global_context import (
    API_CALL,
    FAILED,
    READY,
    RESOURCE,
    EntryChange,
    EntryState,
    GlobalContextView,
    object_key,
)
from vpol.cel.libraries.kubernetes.goquote import go_quote
from vpol.cel.offline_backend import split_api_version
from vpol.cli.inputs import expand, load_documents, read_text
from vpol.model.global_context import GlobalContextEntry, is_global_context_document, parse_global_context_entry
from vpol.model.problems import InputError, Problem


def _fail(message: str, file: str, path: str = "globalContextEntries") -> InputError:
    return InputError(Problem(message, file=file, path=path))


def _present(value: Any) -> bool:
    """Kyverno's ``hasData``: given, and not null."""
    return value is not None


def validate_mock_entries(entries: Any, file: str) -> None:
    """Kyverno's ``ValidateGlobalContextEntries``, with its messages."""
    if entries is None:
        return
    if not isinstance(entries, list):
        raise _fail("globalContextEntries must be a list", file)
    seen: set[str] = set()
    for i, e in enumerate(entries):
        here = f"globalContextEntries[{i}]"
        if not isinstance(e, dict):
            raise _fail("globalContextEntries: each entry must be an object", file, here)
        name = str(e.get("name") or "").strip()
        if not name:
            raise _fail("globalContextEntries: name is required", file, here)
        if name in seen:
            raise _fail(f"globalContextEntries: duplicate name {go_quote(name)}", file, here)
        seen.add(name)
        label = go_quote(str(e.get("name")))
        for p in e.get("projections") or []:
            pname = str((p or {}).get("name") or "").strip() if isinstance(p, dict) else ""
            if not pname:
                raise _fail(f"globalContextEntries entry {label}: projection name is required", file, here)
            if not str(p.get("path") or "").strip():
                raise _fail(f"globalContextEntries entry {label} projection {go_quote(str(p.get('name')))}: path is "
                            "required", file, here)
        sources = [_present(e.get("data")), "resources" in e and e["resources"] is not None,
                   "resourceFiles" in e and e["resourceFiles"] is not None]
        if sum(sources) > 1:
            raise _fail(f"globalContextEntries entry {label}: data, resources, and resourceFiles are mutually "
                        "exclusive", file, here)
        if sum(sources) == 0:
            raise _fail(f"globalContextEntries entry {label}: one of data, resources, or resourceFiles is required",
                        file, here)
        if sources[0] and not isinstance(e["data"], dict):
            raise _fail(f"globalContextEntries entry {label}: data must be a JSON object", file, f"{here}.data")
        if sources[1]:
            for j, r in enumerate(e["resources"] if isinstance(e["resources"], list) else [e["resources"]]):
                if not isinstance(r, dict):
                    raise _fail(f"globalContextEntries entry {label} resources[{j}]: must be a JSON object "
                                "(Kubernetes resource manifest)", file, f"{here}.resources[{j}]")
        if sources[2]:
            for j, f in enumerate(e["resourceFiles"] if isinstance(e["resourceFiles"], list) else [e["resourceFiles"]]):
                path = str(f or "").strip()
                if not path:
                    raise _fail(f"globalContextEntries entry {label} resourceFiles[{j}]: file path must not be empty",
                                file, f"{here}.resourceFiles[{j}]")
                if path.startswith("/") or Path(path).is_absolute():
                    raise _fail(f"globalContextEntries entry {label} resourceFiles[{j}]: file path must not be "
                                "absolute", file, f"{here}.resourceFiles[{j}]")
                clean = posixpath.normpath(PurePosixPath(path.replace("\\", "/")).as_posix())
                if clean == ".." or clean.startswith("../"):
                    raise _fail(f"globalContextEntries entry {label} resourceFiles[{j}]: file path must not escape "
                                "the test directory", file, f"{here}.resourceFiles[{j}]")


def _resource_files(entry: Mapping[str, Any], base: Path, file: str) -> list[Any]:
    """Kyverno's ``ResolveGCEResourceFiles``: every non-empty document of every file, in order."""
    out: list[Any] = []
    for f in entry["resourceFiles"]:
        path = base / str(f).strip()
        try:
            docs = load_documents(path)
        except InputError as exc:
            raise _fail(f"error: failed to load globalContextEntries resource files: globalContextEntries "
                        f"{go_quote(str(entry['name']))} resourceFiles {go_quote(str(f))}: {exc.problem.message}",
                        file) from None
        for j, doc in enumerate(docs):
            if doc.data is None or doc.data == {}:
                continue
            if not isinstance(doc.data, dict):
                raise _fail(f"error: failed to load globalContextEntries resource files: globalContextEntries "
                            f"{go_quote(str(entry['name']))} resourceFiles {go_quote(str(f))}: document[{j}]: "
                            "invalid YAML: not an object", file)
            out.append(doc.data)
    return out


def resolve_mock_entry(entry: Mapping[str, Any], resources: list[Any] | None = None) -> Any:
    """Kyverno's ``ResolveGlobalContextMockData``: the data a mocked entry serves (ValueError with Kyverno's
    message when it cannot be resolved). ``resources``: the entry's objects (inline or read from its files)."""
    name = go_quote(str(entry.get("name")))
    projections = [p for p in entry.get("projections") or [] if isinstance(p, dict)]
    if resources is not None:
        root: Any = go_json_objects(resources)
    else:
        data = entry.get("data")
        if data is None:
            if projections:
                raise ValueError(f"globalContextEntries {name}: data is required when projections are set")
            return None
        root = go_jmespath.go_json(data)
    field_path = str(entry.get("fieldPath") or "")
    if field_path:
        try:
            root = go_jmespath.search(field_path, root)
        except go_jmespath.JMESPathError as exc:
            raise ValueError(f"globalContextEntries {name} fieldPath: {_one_line(exc)}") from None
    if not projections:
        return root
    out: dict[str, Any] = {}
    for p in projections:
        pname = str(p.get("name") or "")
        if not pname:
            raise ValueError(f"globalContextEntries {name} projection name must not be empty")
        path = str(p.get("path") or "")
        try:
            out[pname] = go_jmespath.search(path, root)
        except go_jmespath.JMESPathError as exc:
            raise ValueError(f"globalContextEntries {name} projection {go_quote(pname)} path {go_quote(path)}: "
                             f"{_one_line(exc)}") from None
    return out


def go_json_objects(objects: Iterable[Any]) -> list[Any]:
    return [go_jmespath.go_json(o) for o in objects]


def _one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def load_mock_entries(entries: Any, base: Path, file: str) -> dict[str, Any]:
    """A test's ``globalContextEntries``: validated, files read, resolved to name -> data."""
    validate_mock_entries(entries, file)
    out: dict[str, Any] = {}
    for entry in entries or []:
        resources: list[Any] | None = None
        if entry.get("resourceFiles") is not None:
            resources = _resource_files(entry, base, file)
        elif entry.get("resources") is not None:
            resources = list(entry["resources"]) if isinstance(entry["resources"], list) else [entry["resources"]]
        try:
            out[str(entry["name"]).strip()] = resolve_mock_entry(entry, resources)
        except ValueError as exc:
            raise _fail(str(exc), file) from None
    return out


def load_mock_files(paths: Iterable[str]) -> tuple[dict[str, Any], list[tuple[GlobalContextEntry, str]]]:
    """``--global-context`` files: mocked entries (a ``globalContextEntries`` list, as in a test file) and
    GlobalContextEntry objects (with their file)."""
    mocks: dict[str, Any] = {}
    objects: list[tuple[GlobalContextEntry, str]] = []
    for path in paths:
        for doc in load_documents(Path(path)):
            data = doc.data
            if is_global_context_document(data):
                objects.append((parse_entry(data, doc.file, doc), doc.file))
            elif isinstance(data, dict) and "globalContextEntries" in data:
                mocks.update(load_mock_entries(data["globalContextEntries"], Path(doc.file).parent, doc.file))
            elif data is not None:
                raise InputError(Problem("expected GlobalContextEntry objects or a globalContextEntries list",
                                         file=doc.file, position=doc.position("")))
    return mocks, objects


def parse_entry(data: Any, file: str, doc: Any = None) -> GlobalContextEntry:
    entry, problems = parse_global_context_entry(data, doc)
    errors = [p.located(file=file) for p in problems if p.severity == "error"]
    if entry is None or errors:
        raise InputError(errors[0] if errors else Problem("invalid GlobalContextEntry", file=file))
    return entry


def entries_view(entries: Iterable[GlobalContextEntry], objects: Iterable[Mapping[str, Any]],
                 plural: Any) -> GlobalContextView:
    """GlobalContextEntry objects served from the objects given (``plural(group, kind)``: a kind's resource)."""
    wanted = list(entries)
    found: dict[str, dict[str, Any]] = {e.name: {} for e in wanted if e.resource is not None}
    if found:
        for obj in objects:
            if not isinstance(obj, Mapping):
                continue
            group, version = split_api_version(str(obj.get("apiVersion") or ""))
            resource = plural(group, str(obj.get("kind") or ""))
            namespace = str((obj.get("metadata") or {}).get("namespace") or "")
            for e in wanted:
                s = e.resource
                if s is not None and (s.group, s.version, s.resource) == (group, version, resource) and \
                        (not s.namespace or s.namespace == namespace):
                    found[e.name][object_key(obj)] = dict(obj)
    view = GlobalContextView()
    changes: dict[str, EntryChange] = {}
    for e in wanted:
        if e.resource is not None:
            projections = tuple((p.name, p.jmes_path) for p in e.projections)
            changes[e.name] = EntryChange(EntryState(e.name, RESOURCE, READY, projections=projections), reset=True,
                                          objects=found[e.name])
        else:
            changes[e.name] = EntryChange(EntryState(
                e.name, API_CALL, FAILED,
                error=f"global context entry {go_quote(e.name)} calls an API ({e.source}), which is not done "
                      "offline: give its data in a globalContextEntries list (vpol apply --global-context FILE)"))
    view.apply(changes)
    return view


def entries_in(resource_paths: Iterable[str]) -> list[tuple[GlobalContextEntry, str]]:
    """GlobalContextEntry objects among resource files. Only files whose text names the kind are parsed here,
    so a large input of other objects is not read twice."""
    found: list[tuple[GlobalContextEntry, str]] = []
    for path in expand(resource_paths):
        if str(path) == "-":
            continue  # stdin is read once, by the evaluation
        try:
            text = read_text(path)
        except InputError:
            continue  # reported when the resources are read
        if "GlobalContextEntry" not in text:
            continue
        try:
            docs = load_documents(path)
        except InputError:
            continue
        for doc in docs:
            if is_global_context_document(doc.data):
                found.append((parse_entry(doc.data, doc.file, doc), doc.file))
    return found
