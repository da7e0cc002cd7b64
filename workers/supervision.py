"""A command that supervises its own processes: started, started again when one ends, stopped together.

The gateway runs several processes on its ports (``gateway.processes``, :mod:`workers.gateway.process`);
the mirror and the worker run their one process supervised, since a client library they rely on can
abort the whole process on an ordinary event: librdkafka (2.16, and its master) aborts or segfaults once
a group request's own time-out passed while it looked for the group's coordinator and the answer then
came (confluentinc/librdkafka#4605; :data:`switchyard.admins.GROUP_REQUEST_TIMEOUT_S` keeps Switchyard's
own requests out of it). Started again, the mirror resumes from what the target holds, and the worker's
activities are retried. Each process has Python's fault handler on (``PYTHONFAULTHANDLER``): one that
dies of a signal leaves every thread's stack in its log.

The supervisor starts the processes, starts again one that exits (after ``RESTART_AFTER_S``, more for
one that keeps failing), and stops all of them on SIGTERM or SIGINT. Each process says when it serves,
over a pipe the supervisor hands it (``READY_FD``). A process whose first start ends with an error before
it said so failed to start — a port taken, ZooKeeper unreachable, a bad key — and every other would fail
alike: the supervisor then stops the rest and exits with its code, as an unsupervised process would. (A
timer would not do: on a loaded host a start can take longer than any fixed bound, and its failure would
be taken for a crash and restarted for ever.) The processes die with the supervisor (a parent-death
signal), so a supervisor killed outright leaves none running behind it.
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
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

STARTING_S = 10.0
"""A process that ends sooner than this after its start counts as failing again (its restarts back off)."""
READY_FD = "SWITCHYARD_READY_FD"
"""The environment variable naming the pipe a process writes to once it serves."""
RESTART_AFTER_S, RESTART_AFTER_MOST_S = 1.0, 30.0
STOP_WAIT_S = 30.0
"""How long a process is given to end its work (a gateway its connections) before it is killed."""
_POLL_S = 0.2


class Supervisor:
    """Runs ``count`` processes named ``name``, process ``i`` as ``command(i)`` with the environment
    overrides ``env(i)``."""

    def __init__(
        self,
        name: str,
        command: Callable[[int], Sequence[str]],
        count: int,
        env: Callable[[int], dict[str, str]] | None = None,
    ) -> None:
        self.name, self.command, self.count = name, command, count
        self.env = env or (lambda _index: {})
        self._stopping = False
        self._children: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self._pipes: dict[int, int] = {}
        """Per process that has not yet said it serves, the pipe it will say so on."""
        self._failures: dict[int, int] = {}
        """Per process, how many times in a row it ended before serving or within STARTING_S of a start."""
        self._down: dict[int, float] = {}
        """Per process started again and not yet serving, when it was found ended."""

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        try:
            for index in range(self.count):
                self._start(index)
            if self.count > 1:
                log.info("%s: %d processes", self.name, self.count)
            return self._watch()
        finally:
            self._stop_all()

    def stop(self, *_signal: object) -> None:
        """Stop every process and return from :meth:`run` (the SIGTERM and SIGINT handler)."""
        self._stopping = True  # only a flag: the main thread notices it within _POLL_S

    def _start(self, index: int) -> None:
        argv = list(self.command(index))
        read, write = os.pipe()
        os.set_blocking(read, False)
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", **self.env(index), READY_FD: str(write)}
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
            if index in self._down:  # how long its clients went without it: what an operator asks first
                down_s = time.monotonic() - self._down.pop(index)
                log.info("%s process %d serving again, %.1fs after it exited", self.name, index, down_s)
        return bool(said)

    def _watch(self) -> int:
        name = self.name
        while not self._stopping:
            time.sleep(_POLL_S)
            for index, (child, started) in list(self._children.items()):
                code = child.poll()
                serving = self._serving(index)  # after: what an ended process said is all in the pipe
                if code is None or self._stopping:
                    continue
                self._forget_pipe(index)
                self._down.setdefault(index, time.monotonic())
                if code > 0 and not serving and index not in self._failures:  # it said why
                    if self.count > 1:
                        log.error("%s process %d exited (%d) starting: the others stop", name, index, code)
                    return code
                quick = not serving or time.monotonic() - started < STARTING_S
                self._failures[index] = self._failures.get(index, 0) + 1 if quick else 1
                wait_s = min(RESTART_AFTER_S * 2 ** (self._failures[index] - 1), RESTART_AFTER_MOST_S)
                log.warning("%s process %d exited (%d): starting it again in %gs", name, index, code, wait_s)
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
                log.warning("%s process %d did not stop in time: killed", self.name, child.pid)
                child.kill()
                child.wait()


def say_serving() -> None:
    """In a supervised process, once it serves: tell the supervisor (see ``READY_FD``)."""
    named = os.environ.pop(READY_FD, None)
    if named is not None:
        fd = int(named)
        try:
            os.write(fd, b"s")
        finally:
            os.close(fd)


def die_with_supervisor() -> None:
    """In a supervised process, first thing: SIGTERM when the supervisor dies (Linux's
    PR_SET_PDEATHSIG), so none serves on without one to stop it; gone already, none starts."""
    supervisor = os.getppid()
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != supervisor or supervisor == 1:
        raise SystemExit("the supervisor is gone")


_PR_SET_PDEATHSIG = 1


def switchyard_command(config_path: str | None, *args: str) -> list[str]:
    """How a supervised process starts: ``switchyard ARGS`` in this interpreter, the same configuration."""
    return [sys.executable, "-m", "switchyard", *(["--config", config_path] if config_path else []), *args]
