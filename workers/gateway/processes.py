"""One gateway served by several processes (``gateway.processes``), so its ceiling grows with cores.

Each process binds the gateway's ports with SO_REUSEPORT and the kernel spreads new connections over
them. To ZooKeeper each is a gateway of its own — registration ``<id>.<i>``, its acknowledgements, its
usage and acknowledged ends — and the virtual broker ids are the ones every gateway shares, so a saga
waits for every process, and a client whose connections land on two processes is served as by a pair
of gateways. Process ``i`` serves ``/metrics`` on ``telemetry.prometheus_listen``'s port + ``i`` (a
scrape must reach one process, not whichever the kernel picks); ``/health`` and ``/ready`` share the
gateway's health port like its Kafka ports.

The supervisor starts the processes, starts again one that exits (after ``RESTART_AFTER_S``), and
stops all of them on SIGTERM or SIGINT. A process that exits with an error within ``STARTING_S`` of its
start failed to start — a port taken, ZooKeeper unreachable, a bad key — and every other would fail
alike: the supervisor then stops the rest and exits with its code, as a single gateway would. One ended
by a signal (killed, out of memory) is started again however young.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from switchyard.config import Config, split_hostport

log = logging.getLogger(__name__)

STARTING_S = 10.0
RESTART_AFTER_S = 1.0
STOP_WAIT_S = 30.0
"""How long a process is given to end its connections and deregister before it is killed."""
_POLL_S = 0.2


def member_id(base: str, index: int) -> str:
    """The registration of process ``index`` of gateway ``base``."""
    return f"{base}.{index}"


def member_env(config: Config, index: int) -> dict[str, str]:
    """The environment overrides of process ``index``: its own metrics port."""
    listen = config.telemetry.prometheus_listen
    if not listen:
        return {}
    host, port = split_hostport(listen)
    return {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": f"{host}:{port + index}"}


class Supervisor:
    """Runs ``count`` processes of ``command`` (the gateway command line, less ``--member``)."""

    def __init__(self, config: Config, command: Sequence[str], count: int) -> None:
        self.config, self.command, self.count = config, list(command), count
        self._stopping = threading.Event()
        self._children: dict[int, tuple[subprocess.Popen[bytes], float]] = {}

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: self._stopping.set())
        for index in range(self.count):
            self._start(index)
        log.info("gateway: %d processes share its ports", self.count)
        try:
            return self._watch()
        finally:
            self._stop_all()

    def _start(self, index: int) -> None:
        argv = [*self.command, "--member", str(index)]
        env = {**os.environ, **member_env(self.config, index)}
        self._children[index] = (subprocess.Popen(argv, env=env), time.monotonic())

    def _watch(self) -> int:
        while not self._stopping.wait(_POLL_S):
            for index, (child, started) in list(self._children.items()):
                code = child.poll()
                if code is None:
                    continue
                if code > 0 and time.monotonic() - started < STARTING_S:
                    log.error("gateway process %d exited (%d) starting: the others are stopped", index, code)
                    return code or 1
                log.warning("gateway process %d exited (%d): starting it again", index, code)
                if self._stopping.wait(RESTART_AFTER_S):
                    break
                self._start(index)
        return 0

    def _stop_all(self) -> None:
        children = [child for child, _ in self._children.values() if child.poll() is None]
        for child in children:
            child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S
        for child in children:
            try:
                child.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                log.warning("gateway process %d did not stop in time: killed", child.pid)
                child.kill()
                child.wait()


def gateway_command_line(config_path: str | None, gateway_id: str) -> list[str]:
    """How a process of this gateway is started: this interpreter, the same configuration."""
    return [
        sys.executable, "-m", "switchyard", *(["--config", config_path] if config_path else []),
        "gateway", "--id", gateway_id,
    ]  # fmt: skip
