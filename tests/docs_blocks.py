"""The fenced blocks of the README and docs, and how the docs tests run them.

Conventions a page follows (docs/development.md, "Commands in the docs"):

- A ```sh block is run, a line at a time (a line ending in ``\\`` continues), in the order written: a block whose
  commands all start with ``vpol`` offline (tests/unit/docs), one with ``kubectl`` against a control plane with
  the operator running (tests/e2e/test_docs_commands.py). Anything else is refused unless the block is marked.
- ``<!-- not run: REASON -->`` on the line before a block: the block needs what the tests cannot have (kind and
  Docker, a real cluster's Deployment); the reason is required. ``<!-- run by: PATH -->``: another test or script
  runs the block's commands (PATH, relative to the repository, must hold each of them).
- A command's trailing comment says what else it should do: ``exit code N`` (or ``exits N``) and the exit code
  must be N; ``denied`` and it must fail with "denied" in its output. Otherwise it must exit 0.
- A ```yaml block holding a ``policies.kyverno.io`` policy is checked with ``vpol check --strict``; other
  ```yaml blocks must parse (fragments of a larger file included).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: The pages whose blocks are run.
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "examples").glob("**/README.md")])

_FENCE = re.compile(r"^```(\w*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->\s*$")
_RUN_BY = re.compile(r"^<!--\s*run by:\s*(\S+)\s*-->\s*$")
_EXIT = re.compile(r"\b(?:exit code|exits)\s+(\d+)\b")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the reason given, when marked
    run_by: str | None = None  # the file that runs it, when marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


@dataclass(frozen=True)
class Command:
    block: Block
    line: int
    text: str  # as written, continuations joined
    exit_code: int | None  # None: any non-zero
    output_has: str = ""

    @property
    def where(self) -> str:
        return f"{self.block.path.relative_to(REPO)}:{self.line}"


def blocks(pages: list[Path] = PAGES) -> list[Block]:
    out: list[Block] = []
    for path in pages:
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            m = _FENCE.match(lines[i])
            if m is None:
                i += 1
                continue
            start = i
            i += 1
            body: list[str] = []
            while i < len(lines) and lines[i].rstrip() != "```":
                body.append(lines[i])
                i += 1
            i += 1
            before = lines[start - 1] if start > 0 else ""
            marked, run_by = _NOT_RUN.match(before), _RUN_BY.match(before)
            out.append(Block(path, start + 1, m.group(1), "\n".join(body) + "\n",
                             marked.group(1) if marked else None, run_by.group(1) if run_by else None))
    return out


def _comment(line: str) -> str:
    """The trailing ``# ...`` comment of a shell line (a ``#`` outside quotes, after a space)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i + 1:]
    return ""


def commands(block: Block) -> list[Command]:
    out: list[Command] = []
    pending: list[str] = []
    first = 0
    for offset, raw in enumerate(block.text.splitlines()):
        if not pending:
            first = block.line + 1 + offset
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
        if raw.rstrip().endswith("\\"):
            pending.append(raw.rstrip()[:-1])
            continue
        pending.append(raw)
        text = " ".join(p.strip() for p in pending)
        pending = []
        comment = _comment(text)
        exit_match = _EXIT.search(comment)
        if "denied" in comment:
            out.append(Command(block, first, text, None, "denied"))
        else:
            out.append(Command(block, first, text, int(exit_match.group(1)) if exit_match else 0))
    return out


def kind_of(block: Block) -> str:
    """``offline``, ``cluster``, ``not run``, ``run by`` or ``unclassified`` (a sh block), ``yaml`` or ``other``."""
    if block.lang == "yaml":
        return "yaml"
    if block.lang != "sh":
        return "other"
    if block.not_run is not None:
        return "not run"
    if block.run_by is not None:
        return "run by"
    words = [c.text.split()[0] for c in commands(block)]
    if words and all(w == "vpol" for w in words):
        return "offline"
    if words and all(w in ("vpol", "kubectl", "for") for w in words) and "kubectl" in " ".join(
            c.text for c in commands(block)):
        return "cluster"
    return "unclassified"


def check_ran(command: Command, proc: subprocess.CompletedProcess[str]) -> None:
    """Assert that ``proc``, the run of ``command``, did what the page says: no traceback, and the exit code (or
    the failure and its words) its comment gives."""
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, f"{command.where}: {command.text}\n{output[-3000:]}"
    if command.exit_code is None:
        assert proc.returncode != 0 and command.output_has in output, f"{command.where}: {command.text}\n{output}"
    else:
        assert proc.returncode == command.exit_code, (
            f"{command.where}: `{command.text}` exited {proc.returncode}, the page says {command.exit_code}\n"
            f"{output[-3000:]}")
