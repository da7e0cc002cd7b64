"""Background processes the stack owns, remembered by pid files so ``down`` stops only what ``up`` started.

A pid file records the pid together with the process's start time (from ``/proc``), so a pid the kernel
has since given to an unrelated process is recognised as stale and never signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from switchyard.errors import StackError
from switchyard.pids import alive, is_zombie, start_ticks


@dataclass(frozen=True)
class ManagedProcess:
    """One long-running process with its pid file and log file in the state directory."""

    name: str
    state_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.state_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "logs" / f"{self.name}.log"

    def pid(self) -> int | None:
        """The pid of our process if it is still running; a stale pid file is removed."""
        try:
            record = json.loads(self.pid_file.read_text())
            pid, ticks = int(record["pid"]), int(record["start_ticks"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if start_ticks(pid) == ticks and not is_zombie(pid):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(
        self, argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> int:
        """Start ``argv`` detached in its own session, output appended to the log file."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise StackError(f"{self.name}: cannot run {argv[0]}: {exc.strerror}") from exc
        ticks = start_ticks(proc.pid)
        tmp = self.pid_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": proc.pid, "start_ticks": ticks, "argv": list(argv)}))
        tmp.replace(self.pid_file)
        return proc.pid

    def stop(self, *, grace_s: float = 10.0) -> bool:
        """Stop the process group (TERM, then KILL after the grace period). False if it was not running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and alive(pid):
            time.sleep(0.05)
        if alive(pid):
            _signal_group(pid, signal.SIGKILL)
            while alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 15) -> str:
        try:
            return tail(self.log_file.read_text(errors="replace"), lines)
        except OSError:
            return "(no log)"


def tail(output: str, lines: int = 15) -> str:
    """The last lines of a process's output without the frames of Java stack traces, which would
    otherwise fill them and hide the exception that says why (a JVM's reason is the line above)."""
    said = [line for line in output.splitlines() if not _JAVA_FRAME.match(line)]
    return "\n".join(said[-lines:])


_JAVA_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ (more|common frames omitted))")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # the process leads its own session, so its group id is its pid
