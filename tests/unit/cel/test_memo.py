"""vpol.cel.memo: one computation per key, also when threads ask at the same moment."""

from __future__ import annotations

import threading

import pytest

from vpol.cel.memo import BoundedMemo


def _ask_while_computing(memo: BoundedMemo[str], first_compute, other_compute) -> tuple[str, str]:
    """Thread 1 asks for "k" and computes with ``first_compute`` (which waits for ``release``); thread 2 asks for
    "k" while it does. Returns both answers."""
    answers: dict[int, str] = {}

    def first() -> None:
        try:
            answers[1] = memo.get("k", first_compute)
        except RuntimeError:
            answers[1] = "raised"

    t1 = threading.Thread(target=first)
    t1.start()
    started.wait(5)
    t2 = threading.Thread(target=lambda: answers.__setitem__(2, memo.get("k", other_compute)))
    t2.start()
    t2.join(0.3)
    assert t2.is_alive(), "the second ask did not wait for the first computation"
    release.set()
    t1.join(5)
    t2.join(5)
    return answers[1], answers[2]


started = threading.Event()
release = threading.Event()


@pytest.fixture(autouse=True)
def _events():
    started.clear()
    release.clear()
    yield
    release.set()


def test_a_key_asked_by_two_threads_at_once_is_computed_once():
    memo: BoundedMemo[str] = BoundedMemo(4)
    calls: list[str] = []

    def slow() -> str:
        calls.append("first")
        started.set()
        release.wait(5)
        return "answer"

    def other() -> str:
        calls.append("second")
        return "other answer"

    assert _ask_while_computing(memo, slow, other) == ("answer", "answer")
    assert calls == ["first"]
    assert memo.get("k", other) == "answer" and calls == ["first"]


def test_a_waiter_computes_itself_when_the_first_computation_fails():
    memo: BoundedMemo[str] = BoundedMemo(4)

    def failing() -> str:
        started.set()
        release.wait(5)
        raise RuntimeError("boom")

    assert _ask_while_computing(memo, failing, lambda: "mine") == ("raised", "mine")
    assert memo.get("k", lambda: "not asked") == "mine"


def test_a_waiter_is_not_blocked_for_longer_than_its_wait():
    memo: BoundedMemo[str] = BoundedMemo(4, wait=0.05)
    hung = threading.Event()
    t = threading.Thread(target=lambda: memo.get("k", lambda: (started.set(), hung.wait(5), "late")[2]), daemon=True)
    t.start()
    started.wait(5)
    assert memo.get("k", lambda: "soon") == "soon"
    hung.set()
    t.join(5)


def test_the_computing_thread_asking_again_computes_instead_of_waiting_for_itself():
    memo: BoundedMemo[int] = BoundedMemo(4)
    depth = []

    def nested() -> int:
        depth.append(1)
        return 1 if len(depth) > 1 else memo.get("k", nested) + 1

    assert memo.get("k", nested) == 2
