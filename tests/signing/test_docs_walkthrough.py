"""The walkthrough of docs/image-validating-policies.md ("A signed image in a local registry") runs as written.

The page's ```sh blocks marked ``<!-- run by: tests/signing/test_docs_walkthrough.py -->`` are run in page order,
a command at a time with bash (tests/docs_blocks.py reads them), in an empty temporary directory standing for the
reader's, with crane, cosign (tests/signing/tools.py, built from Go modules and cached) and vpol on the PATH and
HOME in that directory. Where the test does what the reader does by hand, or differently:

- the page's ```yaml blocks whose first line is ``# save as: FILE`` are written to FILE first (the reader saves
  them as the page says);
- ``localhost:5000`` is replaced everywhere (commands and files) by localhost and a free port, as 5000 may be taken;
- a command ending in ``&`` (the registry) is started as a background process of this test, which waits until it
  accepts connections and stops it at the end (the reader stops it with ``kill %1``);
- cosign's password prompts are answered by ``COSIGN_PASSWORD``.

Each command must exit as its trailing comment says (tests/docs_blocks.check_ran), and the rows (policy, resource,
result, and the message up to its explanation) of the last ``vpol apply`` must be those of the ```text block
the page shows after the commands.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.docs_blocks import REPO, Block, _comment, blocks, check_ran, commands
from tests.signing.tools import free_port, tools

PAGE = REPO / "docs" / "image-validating-policies.md"
RUNNER = "tests/signing/test_docs_walkthrough.py"
PAGE_HOST = "localhost:5000"


def _page() -> tuple[list[Block], dict[str, str], Block]:
    """The blocks this test runs, the files the page asks to save (name: text), and the expected output."""
    page = blocks([PAGE])
    run = [b for b in page if b.run_by == RUNNER]
    assert run, f"{PAGE.name}: no block marked <!-- run by: {RUNNER} -->"
    files = {}
    for block in page:
        first = block.text.splitlines()[0] if block.text.strip() else ""
        if block.lang == "yaml" and first.startswith("# save as: "):
            files[first.removeprefix("# save as: ").strip()] = block.text
    assert files, f"{PAGE.name}: no ```yaml block starting with '# save as: FILE'"
    after = [b for b in page if b.lang == "text" and b.line > run[-1].line]
    assert after, f"{PAGE.name}: no ```text block with the expected output after the walkthrough's commands"
    return run, files, after[0]


def _rows(output: str) -> list[tuple[str, str, str, str]]:
    """``vpol apply``'s table: (policy, resource, result, message before its first " (")."""
    rows = []
    for line in output.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 3 or parts[0] == "POLICY" or parts[2] not in ("PASS", "FAIL", "WARN", "ERROR", "SKIP"):
            continue
        message = parts[3] if len(parts) > 3 else ""
        rows.append((parts[0], parts[1], parts[2], message.split(" (")[0]))
    return rows


def _vpol_dir() -> str:
    found = shutil.which("vpol", path=str(Path(sys.executable).parent)) or shutil.which("vpol")
    assert found, "the vpol command is not installed (python3 -m pip install -e .)"
    return str(Path(found).parent)


def _wait_for_port(host: str, port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the background command exited {proc.returncode}:\n{log.read_text()[-2000:]}"
        try:
            with socket.create_connection((host, port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {host}:{port} after 30 s:\n{log.read_text()[-2000:]}")


def test_the_signed_image_walkthrough_runs_as_written(tmp_path: Path) -> None:
    run, files, expected = _page()
    built = tools()  # skips without Go (fails under CI=true)
    port = free_port()
    host = f"localhost:{port}"
    work = tmp_path / "walkthrough"
    (work / "home").mkdir(parents=True)
    for name, text in files.items():
        (work / name).write_text(text.replace(PAGE_HOST, host))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COSIGN_", "SIGSTORE_", "TUF_"))}
    env.update(HOME=str(work / "home"), COSIGN_PASSWORD="walkthrough", PATH=os.pathsep.join([
        str(Path(built.crane).parent), str(Path(built.cosign).parent), _vpol_dir(), env.get("PATH", "")]))
    background: list[subprocess.Popen[bytes]] = []
    last_apply = ""
    try:
        for block in run:
            for command in commands(block):
                text = command.text.replace(PAGE_HOST, host)
                comment = _comment(text)
                code = (text[:text.rindex("#" + comment)] if comment else text).rstrip()
                if code.endswith("&"):
                    log = work / f"background-{len(background)}.log"
                    with log.open("wb") as out:
                        proc = subprocess.Popen(["bash", "-c", code[:-1]], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
                    background.append(proc)
                    _wait_for_port("localhost", port, proc, log)
                    continue
                proc_run = subprocess.run(["bash", "-c", text], cwd=work, env=env, stdin=subprocess.DEVNULL,
                                          capture_output=True, text=True, timeout=300)
                check_ran(command, proc_run)
                if code.startswith("vpol apply "):
                    last_apply = proc_run.stdout
    finally:
        for proc in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)  # the process group this test started for the command
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
    want = _rows(expected.text.replace(PAGE_HOST, host))
    assert want, f"{expected.where}: no rows in the expected output"
    assert _rows(last_apply) == want, f"{PAGE.name}: the last vpol apply printed\n{last_apply}\nthe page shows\n" \
                                      f"{expected.text}"
