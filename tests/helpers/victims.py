"""What a chaos trial strikes: Switchyard's processes and the services under them, killed (SIGKILL) or
frozen (SIGSTOP, then SIGCONT after a pause), and brought back as production brings them back — a
supervised command starts its process again by itself, the harness starts a stack service again after
a pause, and a lone gateway at once, as systemd's ``Restart=always`` would. Each strike says how long
its victim was gone: a trial's bound on how long clients are held counts from it."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.stack import Stack, health
from tests.helpers.processes import GatewayProcess, SupervisedProcess, children, descendants, freeze

STRIKES = ("SIGKILL", "SIGSTOP")
BACK_WITHIN_S = 90.0
"""A victim not serving again this long after its strike fails the trial."""


@dataclass
class Struck:
    victim: str
    signal: str
    at: float
    """When (wall clock) it was struck."""
    back_s: float
    """How long it was gone: until it served again after a kill, the pause after a freeze."""

    @property
    def span(self) -> tuple[float, float]:
        """The wall-clock span it was gone."""
        return self.at, self.at + self.back_s


class Victim(ABC):
    name = ""
    strikes: tuple[str, ...] = STRIKES
    """The signals it may be struck with."""

    def strike(self, sig: str, pause_s: float) -> Struck:
        """Kill it (started again ``pause_s`` later where no supervisor does) or freeze it for
        ``pause_s``; what happened."""
        at, started = time.time(), time.monotonic()
        if sig == "SIGSTOP":
            frozen = self.frozen()
            try:
                for pid in frozen:
                    freeze(pid)
                time.sleep(pause_s)
            finally:
                for pid in frozen:
                    with contextlib.suppress(ProcessLookupError):  # gone meanwhile: the others go on
                        os.kill(pid, signal.SIGCONT)
        elif sig == "SIGKILL":
            self.kill_and_restart(pause_s)
        else:
            raise ValueError(f"no strike {sig!r}: one of {STRIKES}")
        return Struck(self.name, sig, at, time.monotonic() - started)

    @abstractmethod
    def pid(self) -> int:
        """The process a strike hits."""

    def frozen(self) -> list[int]:
        """The processes a SIGSTOP freezes."""
        return [self.pid()]

    @abstractmethod
    def kill_and_restart(self, pause_s: float) -> None:
        """SIGKILL it and return once it serves again."""


class SupervisedChild(Victim):
    """The process a supervised command (worker, mirror, gateway of several) runs its work in: its
    supervisor starts it again and logs when it serves."""

    def __init__(self, name: str, command: SupervisedProcess) -> None:
        self.name, self.command = name, command

    def pid(self) -> int:
        """Of several, the first started. A supervisor between two children has none for a moment: a
        strike then ended a whole run (the second 2026-12-04 run, 62 trials in, nothing in the
        supervisor's log), so it is waited for, and a supervisor gone is named."""
        supervisor = self.command.process
        assert supervisor is not None

        def started() -> bool:
            assert supervisor.poll() is None, f"{self.name}: its supervisor exited ({supervisor.returncode})"
            return bool(children(supervisor.pid))

        _until(f"{self.name}: a process under its supervisor {supervisor.pid}", started)
        return min(children(supervisor.pid))

    def kill_and_restart(self, pause_s: float) -> None:
        before = self._served_again()
        os.kill(self.pid(), signal.SIGKILL)
        _until(f"{self.name} serving again", lambda: self._served_again() > before)

    def _served_again(self) -> int:
        return self.command.log.read_text(errors="replace").count(" serving again, ")


RESTART_SEC = 0.1
"""How long systemd waits before it starts a service of ``Restart=always`` again (its ``RestartSec``
default)."""


class LoneGateway(Victim):
    """The only gateway, all its processes (their supervisor's group): nothing of Switchyard's starts it
    again, its service manager does — at once (``RESTART_SEC``), so a killed one is gone for as long as
    it takes to start. Outages of a random length are its freezes': started again after up to 6 s, a
    gateway was gone up to 6.8 s, and kafkajs at its defaults gave sends up after 6.0 s of refused
    connections, which no gateway can answer for (docs/reliability.md)."""

    def __init__(
        self, gateway: GatewayProcess, strikes: tuple[str, ...] = STRIKES, name: str = "gateway"
    ) -> None:
        self.gateway, self.strikes, self.name = gateway, strikes, name

    def pid(self) -> int:
        assert self.gateway.process is not None
        return self.gateway.process.pid

    def frozen(self) -> list[int]:
        """The gateway's supervisor and every process it runs: all of them are the gateway."""
        return [self.pid(), *descendants(self.pid())]

    def kill_and_restart(self, pause_s: float) -> None:
        self.gateway.stop(signal.SIGKILL)
        time.sleep(RESTART_SEC)
        self.gateway.start()


class StackService(Victim):
    """A service of the embedded stack (a broker, ZooKeeper, the Temporal server), started again by the
    stack once it is gone."""

    def __init__(self, name: str, stack: Stack, service: str, strikes: tuple[str, ...] = STRIKES) -> None:
        self.name, self.stack, self.strikes = name, stack, strikes
        self.service = next(s for s in stack.services if s.name == service)

    def pid(self) -> int:
        pid = self.stack.process(self.service).pid()
        assert pid is not None, f"{self.service.name} is not running"
        return pid

    def kill_and_restart(self, pause_s: float) -> None:
        os.kill(self.pid(), signal.SIGKILL)
        service = self.service
        # its port too: a JVM's first thread is a zombie while the others, holding its sockets, still end
        _until(f"{service.name} gone", lambda: self.stack.process(service).pid() is None)
        _until(f"{service.name}'s port closed", lambda: not health.port_open(service.host, service.port))
        time.sleep(pause_s)
        self.stack.up(timeout_s=BACK_WITHIN_S)


class OneOfSeveral(StackService):
    """One of several services whose names start with ``prefix`` (the brokers of a cluster, the nodes
    of a ZooKeeper ensemble), the next one at each strike: the others go on without it."""

    def __init__(self, name: str, stack: Stack, prefix: str) -> None:
        several = [s.name for s in stack.services if s.name.startswith(prefix)]
        assert len(several) > 1, f"one {prefix}: its strike is StackService's"
        super().__init__(name, stack, several[0])
        self._turns = itertools.cycle(several)

    def strike(self, sig: str, pause_s: float) -> Struck:
        turn = next(self._turns)
        self.service = next(s for s in self.stack.services if s.name == turn)
        return super().strike(sig, pause_s)


def _until(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + BACK_WITHIN_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {BACK_WITHIN_S:g}s")
        time.sleep(0.1)
