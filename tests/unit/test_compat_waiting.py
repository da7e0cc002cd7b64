"""Waiting on a test application: one that wrote its last event and exited is done, not gone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers.compat import App, Seen, wait_until


def _exited(tmp_path: Path) -> App:
    app = App("java", "one gateway", "app", "topic", tmp_path)
    (tmp_path / "app.log").write_text("")
    app.process = subprocess.Popen(["true"])
    app.process.wait()
    return app


def test_an_application_that_wrote_its_last_event_after_the_look_and_exited_is_done(tmp_path: Path) -> None:
    """A CI run failed so: its events read, then the Java application wrote "produced" and exited, and the
    exit was taken for a crash."""
    app = _exited(tmp_path)

    def done(_: App, seen: Seen) -> bool:
        answer = seen.produced is not None
        (tmp_path / "events.jsonl").write_text('{"k":"produced","t":1.0,"n":3}\n')  # just after the look
        return answer

    wait_until("its last records", [app], done, 5)
    assert app.seen().produced == 3


def test_an_application_that_exited_without_its_last_event_is_named(tmp_path: Path) -> None:
    app = _exited(tmp_path)
    with pytest.raises(pytest.fail.Exception, match="java through one gateway: the application exited"):
        wait_until("its last records", [app], lambda _, s: s.produced is not None, 5)
