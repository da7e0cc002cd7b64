"""The supervisor of a command's processes (the gateway's several, the mirror's one) tells a process that
failed to start from one that crashed after serving by what the process says, not by how long it ran:
real processes stand in, each told which one it is by ``--member``."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from workers.supervision import Supervisor

# Member 0 does what the test says; member 1 serves until stopped. Each notes its runs and pid.
STAND_IN = """
import sys, time
from pathlib import Path
from workers.supervision import say_serving
notes, plan, member = Path(sys.argv[1]), sys.argv[2], int(sys.argv[-1])
runs = len(list(notes.glob(f"run-{member}-*"))) + 1
(notes / f"run-{member}-{runs}").write_text(str(__import__("os").getpid()))
if member == 0 and plan == "fail-starting":
    time.sleep(0.3)
    sys.exit(7)
say_serving()
if member == 0 and plan == "crash-after-serving" and runs == 1:
    sys.exit(3)
time.sleep(120)
"""


@pytest.fixture
def handlers() -> Iterator[None]:
    """The signal handlers as they were: the supervisor sets its own."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def supervise(notes: Path, plan: str, stop_when: Callable[[], bool] | None = None) -> int:
    command = [sys.executable, "-c", STAND_IN, str(notes), plan]
    supervisor = Supervisor("stand-in", lambda index: [*command, "--member", str(index)], 2)

    def watch() -> None:
        deadline = time.monotonic() + 30
        while stop_when is not None and not stop_when() and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    if stop_when is not None:
        watcher.start()
    return supervisor.run()


def gone(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.usefixtures("handlers")
def test_a_process_ending_before_it_serves_stops_the_others_with_its_code(tmp_path: Path) -> None:
    assert supervise(tmp_path, "fail-starting") == 7
    assert (tmp_path / "run-0-1").exists()
    assert not (tmp_path / "run-0-2").exists()  # not started again
    if (tmp_path / "run-1-1").exists():  # it may not have got that far
        assert gone(tmp_path / "run-1-1")


@pytest.mark.usefixtures("handlers")
def test_a_process_ending_after_it_served_is_started_again_however_soon(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="workers.supervision")
    code = supervise(tmp_path, "crash-after-serving", stop_when=lambda: "serving again" in caplog.text)
    assert code == 0
    assert (tmp_path / "run-0-2").exists()  # started again: a timer would have called it a failed start
    assert re.search(r"stand-in process 0 serving again, \d+\.\ds after it exited", caplog.text), caplog.text
    assert gone(tmp_path / "run-0-2")
    assert gone(tmp_path / "run-1-1")
