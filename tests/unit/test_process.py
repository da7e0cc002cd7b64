from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from switchyard.stack.process import ManagedProcess


def test_start_then_stop(tmp_path: Path) -> None:
    proc = ManagedProcess("sleeper", tmp_path)
    pid = proc.start([sys.executable, "-c", "import time; print('hello', flush=True); time.sleep(60)"])
    assert proc.pid() == pid
    assert proc.stop(grace_s=5)
    assert proc.pid() is None
    assert not proc.pid_file.exists()
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def test_stop_kills_a_process_that_ignores_term(tmp_path: Path) -> None:
    proc = ManagedProcess("stubborn", tmp_path)
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready', flush=True); time.sleep(60)"
    )
    proc.start([sys.executable, "-c", code])
    deadline = time.monotonic() + 10
    while "ready" not in proc.log_tail() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.stop(grace_s=0.5)
    assert proc.pid() is None


def test_a_recycled_pid_is_never_signalled(tmp_path: Path) -> None:
    """A pid file naming a live process that started at another time is stale: dropped, not killed."""
    proc = ManagedProcess("old", tmp_path)
    proc.pid_file.write_text(json.dumps({"pid": os.getpid(), "start_ticks": 1, "argv": ["x"]}))
    assert proc.pid() is None
    assert not proc.stop()
    assert not proc.pid_file.exists()


def test_an_unreadable_pid_file_counts_as_not_running(tmp_path: Path) -> None:
    proc = ManagedProcess("garbled", tmp_path)
    proc.pid_file.write_text("not json")
    assert proc.pid() is None


def test_log_captures_output(tmp_path: Path) -> None:
    proc = ManagedProcess("echo", tmp_path)
    pid = proc.start([sys.executable, "-c", "print('line from child')"])
    os.waitpid(pid, 0)
    assert "line from child" in proc.log_tail()
