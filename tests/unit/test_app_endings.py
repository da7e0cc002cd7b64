"""How the test applications' endings are judged: a clean exit, an exit code, a part that did not end —
and the one kafkajs defect that is said but not counted, a consumer group looping at its stop."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.compat import App, ended_badly
from tests.helpers.processes import busy


def app(
    tmp_path: Path, library: str, *, exit_code: int | None, spun: bool, ended: tuple[str, ...],
    disconnecting: tuple[str, ...] = ("manual", "auto"),
) -> App:  # fmt: skip
    a = App(library, "one gateway", "app", "topic", tmp_path, parts=("produce", "manual", "auto"))
    a.exit_code, a.spun, a.unstopped = exit_code, spun, "its log's tail"
    events = [{"k": "ended", "t": 1.0, "g": g} for g in ended]
    events += [{"k": "disconnecting", "t": 1.0, "g": g} for g in disconnecting]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return a


def test_an_application_that_exited_cleanly_or_not_is_judged_by_its_exit_code(tmp_path: Path) -> None:
    assert ended_badly(app(tmp_path, "kafkajs", exit_code=0, spun=False, ended=())) == []
    assert ended_badly(app(tmp_path, "kafkajs", exit_code=1, spun=False, ended=())) == ["exit code 1"]


GROUPS_LEFT = "still running 30 s after its stop, not ended: manual, auto"


@pytest.mark.parametrize(
    ("library", "spun", "ended", "said"),
    [
        ("kafkajs", True, ("produce",), []),
        ("kafkajs", False, ("produce",), [GROUPS_LEFT]),
        ("kafkajs", True, ("manual", "auto"), ["still running 30 s after its stop, not ended: produce"]),
        ("kafkajs", True, ("produce", "manual", "auto"),
         ["still running 30 s after its stop, not ended: none (all its parts had)"]),
        ("confluent-kafka", True, ("produce",), [GROUPS_LEFT]),
    ],
)  # fmt: skip
def test_only_kafkajs_groups_looping_at_their_stop_are_not_counted(
    tmp_path: Path, library: str, spun: bool, ended: tuple[str, ...], said: list[str]
) -> None:
    assert ended_badly(app(tmp_path, library, exit_code=None, spun=spun, ended=ended)) == said


@contextmanager
def python(code: str) -> Iterator[int]:
    """A Python process running ``code``: its pid."""
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def test_a_process_looping_is_busy_and_one_waiting_is_not() -> None:
    with python("while True: pass") as looping, python("import time; time.sleep(60)") as waiting:
        assert busy(looping, over_s=0.5)
        assert not busy(waiting, over_s=0.5)


def test_a_kafkajs_group_looping_before_it_was_told_to_disconnect_is_counted(tmp_path: Path) -> None:
    looping = app(
        tmp_path, "kafkajs", exit_code=None, spun=True, ended=("produce",), disconnecting=("manual",)
    )
    assert ended_badly(looping) == [GROUPS_LEFT]
