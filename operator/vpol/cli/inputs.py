"""Reading policies, exceptions and resources from files and directories.

This is the CLI's I/O edge: it turns paths into parsed documents and typed
objects, and every problem (unreadable file, bad YAML, invalid policy)
becomes a ``Problem`` naming the file, the field and the position.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vpol.model.documents import Document, iter_documents, parse_documents
from vpol.model.parse import is_exception_document, parse_exception
from vpol.model.policy import PolicyException
from vpol.model.problems import InputError, Position, Problem
from vpol.policies.deleting.model import DeletingPolicy
from vpol.policies.generating.model import GeneratingPolicy
from vpol.policies.image_validating.model import ImageValidatingPolicy
from vpol.policies.mutating.model import MutatingPolicy
from vpol.policies.registry import KINDS, kind_for_document, kind_named
from vpol.policies.validating.model import ValidatingPolicy

YAML_SUFFIXES = (".yaml", ".yml", ".json")


def expand(paths: Iterable[str], *, hidden: bool = False) -> Iterator[Path]:
    """Files named, and YAML/JSON files found under directories (sorted).

    Hidden folders (.git, .chainsaw-test, .kyverno-test...) are passed over unless ``hidden``:
    they hold test fixtures, not policies to check. A hidden folder named on the command line is
    still read. (Kyverno CLI test files live in .kyverno-test folders: `vpol test` asks for them.)
    """
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if hidden or not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(YAML_SUFFIXES):
                        yield Path(root) / name
        else:
            yield path


def read_text(path: Path) -> str:
    try:
        if str(path) == "-":
            return sys.stdin.read()
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(Problem("no such file or directory", file=str(path))) from None
    except UnicodeDecodeError as exc:
        raise InputError(Problem(f"not a UTF-8 text file (byte {exc.start})", file=str(path))) from None
    except OSError as exc:
        raise InputError(Problem(f"cannot read: {exc.strerror}", file=str(path))) from None


def load_documents(path: Path) -> list[Document]:
    text = read_text(path)
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(Problem(f"invalid JSON: {exc.msg}", file=str(path),
                                     position=Position(exc.lineno, exc.colno))) from None
        return [Document(data=data, file=str(path))] if data is not None else []
    return parse_documents(text, str(path))


@dataclass
class Loaded:
    #: The policies of each kind (the cluster-wide kind's name, vpol.policies.registry; both variants), in input order
    #: (MutatingPolicies apply in it).
    by_kind: dict[str, list[Any]] = field(default_factory=lambda: {kind.kind: [] for kind in KINDS})
    exceptions: list[PolicyException] = field(default_factory=list)
    resources: list[Document] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    #: Files that could not be read at all (exit code 2).
    unreadable: list[Problem] = field(default_factory=list)

    @property
    def policies(self) -> list[ValidatingPolicy]:
        return self.by_kind["ValidatingPolicy"]

    @property
    def mutating(self) -> list[MutatingPolicy]:
        return self.by_kind["MutatingPolicy"]

    @property
    def generating(self) -> list[GeneratingPolicy]:
        return self.by_kind["GeneratingPolicy"]

    @property
    def deleting(self) -> list[DeletingPolicy]:
        return self.by_kind["DeletingPolicy"]

    @property
    def image_validating(self) -> list[ImageValidatingPolicy]:
        return self.by_kind["ImageValidatingPolicy"]

    @property
    def any_policy(self) -> bool:
        """Whether any policy (of any kind) was loaded."""
        return any(self.by_kind.values())

    @property
    def has_errors(self) -> bool:
        return any(p.severity == "error" for p in self.problems)


def _readable_documents(paths: Iterable[str], out: Loaded) -> Iterator[Document]:
    """Every document of every file under ``paths``; unreadable files are recorded in ``out``."""
    for path in expand(paths):
        try:
            yield from load_documents(path)
        except InputError as exc:
            out.unreadable.append(exc.problem)


def load_policies(paths: Iterable[str], out: Loaded | None = None, *, strict_kinds: bool = True) -> Loaded:
    """Load the policies of every kind (and PolicyExceptions found beside them)."""
    out = out or Loaded()
    for doc in _readable_documents(paths, out):
        kind = kind_for_document(doc.data)
        if kind is not None:
            policy, problems = kind.parse(doc.data, doc)
            out.problems.extend(problems)
            if policy is not None:
                _add_unique(policy, out.by_kind[kind.kind], out)
        elif is_exception_document(doc.data):
            exc_obj, problems = parse_exception(doc.data, doc)
            out.problems.extend(problems)
            if exc_obj is not None:
                out.exceptions.append(exc_obj)
        elif strict_kinds and (_claims_policy_group(doc.data) or _names_a_policy_kind(doc.data)):
            out.problems.append(_not_a_policy(doc))
        # Anything else (resources, test files...) often sits beside policies: passed over.
    return out


def _add_unique(policy: Any, into: list[Any], out: Loaded) -> None:
    """Append ``policy`` unless one of its kind and key is already there (then that is an error)."""
    first = next((p for p in into if (p.kind, p.key) == (policy.kind, policy.key)), None)
    if first is not None:
        # Two objects of one name cannot exist in a cluster: which one is meant?
        out.problems.append(policy.locate(Problem(
            f'duplicate {policy.kind} "{policy.key}" (first in {first.source or "the input"})', path="metadata.name")))
        return
    into.append(policy)


def _names_a_policy_kind(data: Any) -> bool:
    """A document of one of our kinds whatever its apiVersion (missing, or another group)."""
    return isinstance(data, dict) and (data.get("kind") == "PolicyException" or
                                       kind_named(str(data.get("kind") or "")) is not None)


def _claims_policy_group(data: Any) -> bool:
    return isinstance(data, dict) and str(data.get("apiVersion", "")).split("/")[0] == "policies.kyverno.io"


def _not_a_policy(doc: Document) -> Problem:
    data = doc.data
    what = f'{data.get("apiVersion", "?")}, Kind={data.get("kind", "?")}'
    reason = f"unsupported policies.kyverno.io object ({what}); expected apiVersion policies.kyverno.io/v1 " \
             f"(or v1beta1, v1alpha1) and kind {', '.join(k.kind for k in KINDS)} (each also Namespaced) or " \
             f"PolicyException"
    return Problem(reason, file=doc.file, path="apiVersion", position=doc.position("apiVersion"))


def load_exceptions(paths: Iterable[str], out: Loaded) -> Loaded:
    for doc in _readable_documents(paths, out):
        exc_obj, problems = parse_exception(doc.data, doc)
        out.problems.extend(problems)
        if exc_obj is not None:
            out.exceptions.append(exc_obj)
    return out


def iter_resources(paths: Iterable[str], out: Loaded) -> Iterator[Document]:
    """Kubernetes objects one at a time (``kind: List`` is flattened), parsed without per-field positions
    (libyaml's C parser): memory is bounded by the largest document, not the input. Unreadable files and
    documents that are not objects are recorded in ``out``."""
    for path in expand(paths):
        try:
            text = read_text(path)
            documents = iter_documents(text, str(path)) if path.suffix != ".json" else iter(load_documents(path))
            for doc in documents:
                data = doc.data
                if isinstance(data, dict) and str(data.get("kind", "")).endswith("List") and isinstance(
                        data.get("items"), list):
                    for i, item in enumerate(data["items"]):
                        pos = doc.position(f"items[{i}]")
                        yield Document(data=item, file=doc.file, index=doc.index, positions={"": pos} if pos else {})
                    continue
                if not isinstance(data, dict) or not data.get("kind") or not data.get("apiVersion"):
                    out.problems.append(Problem("not a Kubernetes object: apiVersion and kind are required",
                                                file=doc.file, position=doc.position("")))
                    continue
                yield doc
        except InputError as exc:
            out.unreadable.append(exc.problem)


def load_resources(paths: Iterable[str], out: Loaded) -> Loaded:
    """Kubernetes objects (``kind: List`` is flattened), all at once (see :func:`iter_resources`)."""
    out.resources.extend(iter_resources(paths, out))
    return out
