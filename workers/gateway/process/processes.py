"""One gateway served by several processes (``gateway.processes``), so its ceiling grows with cores.

Each process binds the gateway's ports with SO_REUSEPORT and the kernel spreads new connections over
them. To ZooKeeper each is a gateway of its own — registration ``<id>.<i>``, its acknowledgements, its
usage and acknowledged ends — and the virtual broker ids are the ones every gateway shares, so a saga
waits for every process, and a client whose connections land on two processes is served as by a pair
of gateways. Process ``i`` serves ``/metrics`` on ``telemetry.prometheus_listen``'s port + ``i`` (a
scrape must reach one process, not whichever the kernel picks); ``/health`` and ``/ready`` share the
gateway's health port like its Kafka ports.

The supervisor starts the processes, starts again one that exits (after ``RESTART_AFTER_S``, more for
one that keeps failing), and stops all of them on SIGTERM or SIGINT. Each process says when it serves,
over a pipe the supervisor hands it (``READY_FD``). A process whose first start ends with an error before
it said so failed to start — a port taken, ZooKeeper unreachable, a bad key — and every other would fail
alike: the supervisor then stops the rest and exits with its code, as a single gateway would. (A timer
would not do: on a loaded host a start can take longer than any fixed bound, and its failure would be
taken for a crash and restarted for ever.) The processes die with the supervisor (a parent-death signal),
so a supervisor killed outright leaves none serving behind it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from switchyard.config import Config, split_hostport

log = logging.getLogger(__name__)

STARTING_S = 10.0
"""A process that ends sooner than this after its start counts as failing again (its restarts back off)."""
READY_FD = "SWITCHYARD_GATEWAY_READY_FD"
"""The environment variable naming the pipe a process writes to once it serves."""
RESTART_AFTER_S, RESTART_AFTER_MOST_S = 1.0, 30.0
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
        self._stopping = False
        self._children: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self._pipes: dict[int, int] = {}
        """Per process that has not yet said it serves, the pipe it will say so on."""
        self._failures: dict[int, int] = {}
        """Per process, how many times in a row it ended before serving or within STARTING_S of a start."""

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        try:
            for index in range(self.count):
                self._start(index)
            log.info("gateway: %d processes share its ports", self.count)
            return self._watch()
        finally:
            self._stop_all()

    def stop(self, *_signal: object) -> None:
        """Stop every process and return from :meth:`run` (the SIGTERM and SIGINT handler)."""
        self._stopping = True  # only a flag: the main thread notices it within _POLL_S

    def _start(self, index: int) -> None:
        argv = [*self.command, "--member", str(index)]
        read, write = os.pipe()
        os.set_blocking(read, False)
        env = {**os.environ, **member_env(self.config, index), READY_FD: str(write)}
        try:
            self._children[index] = (subprocess.Popen(argv, env=env, pass_fds=(write,)), time.monotonic())
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        self._pipes[index] = read

    def _serving(self, index: int) -> bool:
        """Whether process ``index`` has said it serves (a process that ended without saying so has not)."""
        read = self._pipes.get(index)
        if read is None:
            return True
        try:
            said = os.read(read, 1)
        except BlockingIOError:
            return False
        if said:
            self._forget_pipe(index)
        return bool(said)

    def _watch(self) -> int:
        while not self._stopping:
            time.sleep(_POLL_S)
            for index, (child, started) in list(self._children.items()):
                code = child.poll()
                serving = self._serving(index)  # after: what an ended process said is all in the pipe
                if code is None or self._stopping:
                    continue
                self._forget_pipe(index)
                if code > 0 and not serving and index not in self._failures:
                    log.error("gateway process %d exited (%d) starting: the others are stopped", index, code)
                    return code
                quick = not serving or time.monotonic() - started < STARTING_S
                self._failures[index] = self._failures.get(index, 0) + 1 if quick else 1
                wait_s = min(RESTART_AFTER_S * 2 ** (self._failures[index] - 1), RESTART_AFTER_MOST_S)
                log.warning("gateway process %d exited (%d): starting it again in %gs", index, code, wait_s)
                deadline = time.monotonic() + wait_s
                while not self._stopping and time.monotonic() < deadline:
                    time.sleep(_POLL_S)
                if not self._stopping:
                    self._start(index)
        return 0

    def _forget_pipe(self, index: int) -> None:
        read = self._pipes.pop(index, None)
        if read is not None:
            os.close(read)

    def _stop_all(self) -> None:
        for index in list(self._pipes):
            self._forget_pipe(index)
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


def say_serving() -> None:
    """In a process of several, once it serves: tell the supervisor (see ``READY_FD``)."""
    named = os.environ.pop(READY_FD, None)
    if named is not None:
        fd = int(named)
        try:
            os.write(fd, b"s")
        finally:
            os.close(fd)


def die_with_supervisor() -> None:
    """In a process of several, first thing: SIGTERM when the supervisor dies (Linux's
    PR_SET_PDEATHSIG), so none serves on without one to stop it; gone already, none starts."""
    supervisor = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor or supervisor == 1:
        raise SystemExit("the gateway's supervisor is gone")


_PR_SET_PDEATHSIG = 1


def gateway_command_line(config_path: str | None, gateway_id: str) -> list[str]:
    """How a process of this gateway is started: this interpreter, the same configuration."""
    return [
        sys.executable, "-m", "switchyard", *(["--config", config_path] if config_path else []),
        "gateway", "--id", gateway_id,
    ]  # fmt: skip
