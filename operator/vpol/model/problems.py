"""Problems found in user input, each carrying where it comes from.

A problem names the file, the object, the field path
(``spec.validations[1].expression``), a position (line and column in the
file, and for CEL errors the position inside the expression) and a reason.
Every layer reports through this one type, so the CLI and the operator
print and store them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based
    #: False for block scalars (| and >): their text is re-flowed, so positions
    #: inside an expression cannot be mapped onto file columns.
    inline: bool = field(default=True, compare=False)

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass(frozen=True)
class Problem:
    message: str
    path: str = ""  # field path, e.g. spec.validations[1].expression
    severity: Severity = "error"
    file: str = ""
    object: str = ""  # e.g. ValidatingPolicy/name
    #: Position in the file of the field's value, when known.
    position: Position | None = None
    #: For CEL problems: position inside the expression and a caret excerpt.
    expression_position: Position | None = None
    excerpt: str = ""
    extra: tuple[str, ...] = field(default=())

    def located(self, *, file: str | None = None, object: str | None = None,
                position: Position | None = None) -> "Problem":
        return replace(
            self,
            file=self.file or (file or ""),
            object=self.object or (object or ""),
            position=self.position or position,
        )

    def where(self) -> str:
        """``file:line:col`` (of the field, shifted by the CEL position when both are known)."""
        parts = []
        if self.file:
            parts.append(self.file)
        pos = self.absolute_position()
        if pos:
            parts.append(str(pos))
        return ":".join(parts)

    def absolute_position(self) -> Position | None:
        if self.position and self.expression_position:
            # Single-line scalars: the expression starts at the field's column.
            if self.expression_position.line == 1 and self.position.inline:
                return Position(self.position.line, self.position.column + self.expression_position.column - 1)
            return Position(self.position.line, self.position.column)
        return self.position

    def short(self) -> str:
        """One line: path and CEL position, reason (used in status conditions)."""
        loc = self.path
        if self.expression_position:
            loc += f" ({self.expression_position})" if loc else str(self.expression_position)
        return f"{loc}: {self.message}" if loc else self.message

    def render(self) -> str:
        """Multi-line human form for the CLI."""
        head = self.where()
        label = "error" if self.severity == "error" else "warning"
        subject = " ".join(p for p in (self.object, self.path) if p)
        pos = f" at {self.expression_position}" if self.expression_position else ""
        where = f"{subject}{pos}: " if subject or pos else ""
        message = self.message.replace("\n", "\n    ")
        line = f"{head + ': ' if head else ''}{label}: {where}{message}"
        if self.excerpt:
            line += "\n" + "\n".join("    " + x for x in self.excerpt.splitlines())
        return line


class InputError(Exception):
    """Input that cannot be read at all (not YAML, not a file)."""

    def __init__(self, problem: Problem):
        super().__init__(problem.render())
        self.problem = problem
