"""Switchyard's own processes on the embedded stack — a gateway, a mirror and a worker — for the demo and
the benchmarks. Each runs as ``switchyard <command>`` in the background with a pid file and a log in the
state directory, like the stack's services, so ``up`` is idempotent and ``stack down`` stops them too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.config import Config
from switchyard.errors import StackError
from switchyard.stack import health
from switchyard.stack.process import ManagedProcess

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Part:
    command: str
    args: tuple[str, ...]
    ready_line: str | None
    """A line its log shows once it works (None: ready when the gateway port answers)."""


PARTS = (
    Part("gateway", ("--id", "embedded-gateway"), None),
    Part("mirror", ("--id", "embedded-mirror"), "following"),
    Part("worker", (), "worker on task queue"),
)


class Deployment:
    def __init__(self, config: Config) -> None:
        if config.source is None:
            raise StackError("Switchyard's processes need a configuration file to run from (--config)")
        self.config = config
        self.path = config.source
        self.state_dir = config.stack.state_dir

    def process(self, part: Part) -> ManagedProcess:
        return ManagedProcess(f"switchyard-{part.command}", self.state_dir)

    @property
    def gateway(self) -> str:
        """Where clients bootstrap."""
        return f"{self.config.gateway.host}:{self.config.gateway.bootstrap_port}"

    def up(self, *, timeout_s: float = 60.0, progress: Progress = lambda _: None) -> None:
        """Start each process not running yet, and wait until it works."""
        for part in PARTS:
            proc = self.process(part)
            if (pid := proc.pid()) is not None:
                progress(f"{part.command}: already running (pid {pid})")
                continue
            logged = proc.log_file.stat().st_size if proc.log_file.exists() else 0
            argv = [sys.executable, "-m", "switchyard", "--config", str(self.path), part.command, *part.args]
            pid = proc.start(argv, cwd=self.state_dir)
            self._wait_ready(part, proc, logged, timeout_s)
            progress(f"{part.command}: running (pid {pid}), log {proc.log_file}")

    def down(self, *, progress: Progress = lambda _: None) -> list[str]:
        stopped = []
        for part in reversed(PARTS):
            if self.process(part).stop(grace_s=20):
                stopped.append(part.command)
                progress(f"{part.command}: stopped")
        return stopped

    def _wait_ready(self, part: Part, proc: ManagedProcess, logged: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ready(part, proc, logged):
            if proc.pid() is None:
                where = f"last lines of {proc.log_file}"
                raise StackError(f"{part.command}: exited during start-up; {where}:\n{proc.log_tail()}")
            if time.monotonic() > deadline:
                proc.stop()
                raise StackError(f"{part.command}: not working after {timeout_s:.0f}s; see {proc.log_file}")
            time.sleep(0.2)

    def _ready(self, part: Part, proc: ManagedProcess, logged: int) -> bool:
        if part.ready_line is None:
            return health.kafka(self.config.gateway.host, self.config.gateway.bootstrap_port).ok
        with proc.log_file.open("rb") as log:
            log.seek(logged)
            return part.ready_line.encode() in log.read()
