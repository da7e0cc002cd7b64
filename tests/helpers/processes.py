"""Real ``switchyard`` processes (gateway, mirror) started by a test, and what a test needs to watch them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from tests.helpers import ports

READY_WITHIN_S = 90.0
"""A process not serving this long after its start failed to start. A gateway of two processes took 20 s
beside three pytest workers on two cores (a 30 s bound failed once)."""


class SwitchyardProcess:
    """A real ``switchyard <command>`` process with its own routing root and a log file."""

    command = ""
    takes_id = True
    """Whether the command is told its name with ``--id``."""

    def __init__(
        self,
        config_path: Path,
        *,
        root: str,
        name: str,
        log: Path,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.id = name
        self.log = log
        self.env = {**os.environ, "SWITCHYARD__ZOOKEEPER__ROOT": root, **(overrides or {})}
        self.argv = [
            sys.executable,
            "-m",
            "switchyard",
            "--config",
            str(config_path),
            self.command,
            *(["--id", name] if self.takes_id else []),
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.launch()
        try:
            self.wait_ready()
        except BaseException:  # not left running: it would write into a routing root being removed
            self.stop(signal.SIGKILL)
            raise

    def launch(self) -> None:
        """Start the process without waiting for it (several start side by side, then are waited for)."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_WITHIN_S
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.command} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def ready(self) -> bool:
        return True

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Signal the process and wait for it. SIGKILL kills the processes it supervises with it (a
        gateway of several, a worker, a mirror), the supervisor frozen meanwhile so that it starts none
        again: else they would get its parting SIGTERM and end in good order — a gateway's went on
        answering while the one started in its place came up, and a chaos trial took that for the new
        one serving (gone 0.3 s, clients held 11 s)."""
        if self.process is None or self.process.poll() is not None:
            return
        if sig == signal.SIGKILL:
            with contextlib.suppress(TimeoutError):  # a thread in the kernel (D) yet: killed all the same
                freeze(self.process.pid, timeout_s=2)  # every thread: one that runs on starts a process again
            for pid in children(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process.send_signal(sig)
        self.process.wait(timeout=30)


class GatewayProcess(SwitchyardProcess):
    """A real `switchyard gateway` process on a free block of ports."""

    command = "gateway"

    def __init__(
        self,
        config_path: Path,
        *,
        root: str,
        gateway_id: str,
        log: Path,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.port = ports.reserve_block(16)
        overrides = {"SWITCHYARD__GATEWAY__BOOTSTRAP_PORT": str(self.port), **(overrides or {})}
        super().__init__(config_path, root=root, name=gateway_id, log=log, overrides=overrides)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ready(self) -> bool:
        from switchyard.stack import health

        return health.kafka("127.0.0.1", self.port).ok


class SupervisedProcess(SwitchyardProcess):
    """A command that runs its work in a process it supervises (workers/supervision.py)."""

    def cpu_s(self) -> float:
        """The CPU seconds the command and the process it supervises have used."""
        assert self.process is not None
        return sum(cpu_seconds(pid) for pid in {self.process.pid, *children(self.process.pid)})

    def supervised_pid(self) -> int | None:
        """The process the command supervises (None: between a death and its restart, or not running)."""
        if self.process is None or self.process.poll() is not None:
            return None
        found = children(self.process.pid)
        return next(iter(found)) if len(found) == 1 else None

    def kill_supervised(self) -> int:
        """SIGKILL the process the command supervises (the one that works): its supervisor starts it
        again; its pid."""
        return self.signal_supervised(signal.SIGKILL)

    def signal_supervised(self, sig: int) -> int:
        """Send ``sig`` to the process the command supervises (SIGSTOP: the work stops, not the command);
        its pid."""
        assert self.process is not None
        (pid,) = children(self.process.pid)
        os.kill(pid, sig)
        return pid


class MirrorProcess(SupervisedProcess):
    """A real `switchyard mirror` process (ready once started: it reports per link in ZooKeeper)."""

    command = "mirror"


class WorkerProcess(SupervisedProcess):
    """A real `switchyard worker` process (ready once it polls its task queue); with ``dies_after``, only
    the process it supervises, which SIGKILLs itself once that step has done its work
    (tests/helpers/dying_worker.py)."""

    command = "worker"
    takes_id = False

    def __init__(self, config_path: Path, *, dies_after: str = "", **named: Any) -> None:
        super().__init__(config_path, **named)
        if dies_after:
            self.argv = [sys.executable, "-m", "tests.helpers.dying_worker", dies_after, *self.argv[3:]]
            self.argv.append("--supervised")

    def ready(self) -> bool:
        return self.log.exists() and "worker on task queue" in self.log.read_text(errors="replace")


def cpu_seconds(pid: int) -> float:
    """The CPU seconds process ``pid`` has used, all its threads, from the kernel's accounting."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def busy(pid: int, over_s: float = 1.0) -> bool:
    """Whether process ``pid`` (its main thread) is running or ready to run at most of 20 looks over the
    next ``over_s`` seconds: a loop that never waits, not a process waiting on something that does not
    come. Asked of its state, not its CPU time: on a loaded machine a loop gets a share of a core."""
    looks = 20
    running = 0
    for _ in range(looks):
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        running += state == "R"
        time.sleep(over_s / looks)
    return running > looks // 2


def freeze(pid: int | None, timeout_s: float = 10) -> int:
    """SIGSTOP ``pid`` and return once every thread of it has stopped (:func:`stopped`), so that nothing
    sent to it after is answered; its pid."""
    assert pid, "the process to freeze is not running"
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout_s
    while not stopped(pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} took a SIGSTOP but did not stop within {timeout_s:.0f}s")
        time.sleep(0.01)
    return pid


def stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` has stopped (taken a SIGSTOP: state T), or ended (a zombie:
    it runs no more either). ``os.kill`` returns before each thread does; a broker's thread that had not
    yet, beside a loaded suite's other workers, answered a write sent after the kill (twice in fresh
    clones' runs)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return bool(states) and all(state in "TtZX" for state in states)


def children(pid: int) -> set[int]:
    """The processes ``pid`` started itself."""
    return {child for child, parent in _parents().items() if parent == pid}


def descendants(pid: int | None = None) -> set[int]:
    """Every process started, directly or not, by ``pid`` (default: this process)."""
    root = os.getpid() if pid is None else pid
    parents = _parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class WebhookProcess(SwitchyardProcess):
    """A real `switchyard webhook` process (ready once /healthz answers)."""

    command = "webhook"
    takes_id = False

    def __init__(self, config_path: Path, *, root: str, log: Path, overrides: dict[str, str]) -> None:
        self.port = ports.reserve(1)[0]
        overrides = {**overrides, "SWITCHYARD__WEBHOOK__LISTEN": f"127.0.0.1:{self.port}"}
        super().__init__(config_path, root=root, name="webhook", log=log, overrides=overrides)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


def own_gateway(
    gateway_id: str, overrides: Callable[[pytest.FixtureRequest], dict[str, str]] = lambda _: {}
) -> Any:
    """A module fixture ``gateway``: a gateway of the module's own on the shared stack's routing tree,
    stopped after the module. In the module: ``gateway = own_gateway("gw-...")``; ``overrides`` gives
    its environment's settings (from the module's other fixtures, through the request)."""

    @pytest.fixture(scope="module", name="gateway")
    def fixture(
        routing: RoutingStore,
        stack_config: Config,
        tmp_path_factory: pytest.TempPathFactory,
        request: pytest.FixtureRequest,
    ) -> Iterator[GatewayProcess]:
        assert stack_config.source is not None
        logs = tmp_path_factory.mktemp(gateway_id)
        process = GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id=gateway_id,
            log=logs / f"{gateway_id}.log", overrides=overrides(request),
        )  # fmt: skip
        process.start()
        try:
            yield process
        finally:
            process.stop()

    return fixture


def _parents() -> dict[int, int]:
    """Each running process's parent."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    return parents
