"""``vpol run --reload`` (development only): restart the process when a source file changes.

Used by the Tilt loop, where edited files are synced into the running
container. Hand-written rather than a file-watching library: polling
modification times of the package's own files once a second is all it needs,
and it adds no dependency to the production image.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

logger = logging.getLogger(__name__)


def _snapshot(root: Path) -> dict[Path, float]:
    out = {}
    for path in root.rglob("*.py"):
        try:
            out[path] = path.stat().st_mtime
        except OSError:
            pass
    return out


def watch_and_restart(interval: float = 1.0) -> threading.Thread:
    root = Path(__file__).resolve().parents[1]
    before = _snapshot(root)

    def loop() -> None:
        while True:
            threading.Event().wait(interval)
            now = _snapshot(root)
            if now != before:
                logger.warning("source changed under %s: restarting", root)
                os.execv(sys.executable, [sys.executable, "-m", "vpol.cli.main", *sys.argv[1:]])

    thread = threading.Thread(target=loop, name="vpol-reload", daemon=True)
    thread.start()
    return thread
