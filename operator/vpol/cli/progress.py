"""A progress line on a terminal (stderr), silent when output is piped."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints ``label n/total`` (``label n`` when the total is not known, 0) at most ten times a second, only
    on a TTY and only for large inputs (a known total of at least THRESHOLD, or once THRESHOLD are done)."""

    THRESHOLD = 200

    def __init__(self, total: int, label: str, *, enabled: bool = True, stream: TextIO | None = None):
        self.stream = stream or sys.stderr
        self.total = total
        self.label = label
        self.count = 0
        self._last = 0.0
        self.enabled = enabled and (total >= self.THRESHOLD or total == 0) and self.stream.isatty()

    def step(self, n: int = 1) -> None:
        self.count += n
        if not self.enabled or (not self.total and self.count < self.THRESHOLD):
            return
        now = time.monotonic()
        if now - self._last >= 0.1:
            self._last = now
            self.stream.write(f"\r{self.label} {self.count}" + (f"/{self.total}" if self.total else ""))
            self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (len(self.label) + 24) + "\r")
            self.stream.flush()
