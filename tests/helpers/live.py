"""A deployment of Switchyard's own processes on the session stack — a gateway, a mirror and a worker on one
routing root, a ledger and a task queue of the test's own — and the CLI, as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from switchyard import temporal
from switchyard.config import Config, load_config
from switchyard.sagas.requests import Progress
from tests.helpers import ports
from tests.helpers.processes import GatewayProcess, MirrorProcess, WorkerProcess

FAST_MIRROR = {
    "SWITCHYARD__MIRROR__TOPIC_REFRESH_S": "1",
    "SWITCHYARD__MIRROR__STATUS_INTERVAL_S": "0.5",
    "SWITCHYARD__MIRROR__GROUP_SYNC_INTERVAL_S": "1",
    "SWITCHYARD__MIRROR__CONSUMER": "{session.timeout.ms: 6000}",
}


AGING_EVERY_S = str(10 * 365 * 24 * 3600)
"""The live workers' aging schedule never fires by itself during a test run (an interval is aligned to
the epoch: a firing on the hour would race a test's own trigger); tests fire it."""


def stalls_reported(live: Live, most: int = 3) -> list[str]:
    """The gateway's reports of a connection's reader or writer long stuck on one request (with the await
    it was stuck in: :mod:`workers.gateway.process.stalls`), the first ``most``; for a failure's message,
    which is what a CI run shows of a failure."""
    if live.gateway is None or not live.gateway.log.exists():
        return []
    lines = live.gateway.log.read_text(errors="replace").splitlines()
    return [line[:600] for line in lines if "; waiting in " in line][:most]


@dataclass
class Live:
    config: Config
    root: str
    ledger: Path
    logs: Path
    overrides: dict[str, str] = field(default_factory=dict)
    queue: str = field(default_factory=lambda: f"sagas-{uuid.uuid4().hex[:8]}")
    gateway: GatewayProcess | None = None
    mirror: MirrorProcess | None = None
    workers: list[WorkerProcess] = field(default_factory=list)
    scraped: dict[str, str] = field(default_factory=dict)
    """Processes that serve Prometheus metrics, by name, with their host:port (see :meth:`scrape`)."""
    scrape_all: bool = False
    """Whether each process this deployment starts serves its metrics for Prometheus."""

    def scrape(self, name: str) -> dict[str, str]:
        """The override that has process ``name`` serve its metrics on a port of its own."""
        if not self.scrape_all:
            return {}
        self.scraped[name] = f"127.0.0.1:{ports.reserve(1)[0]}"
        return {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": self.scraped[name]}

    @property
    def env(self) -> dict[str, str]:
        """What every process of this deployment, and its CLI, is configured with on top of the file."""
        return {
            "SWITCHYARD__ZOOKEEPER__ROOT": self.root,
            "SWITCHYARD__LEDGER__URL": f"sqlite:///{self.ledger}",
            "SWITCHYARD__TEMPORAL__TASK_QUEUE": self.queue,
            "SWITCHYARD__SAGAS__AGING_EVERY_S": AGING_EVERY_S,
            **self.overrides,
        }

    @property
    def effective(self) -> Config:
        """The configuration this deployment's processes run with (its root, ledger and task queue)."""
        return load_config(self.path, environ={**os.environ, **self.env})

    @property
    def path(self) -> Path:
        assert self.config.source is not None
        return self.config.source

    def start(self) -> Live:
        """The gateway, the mirror and a worker, started side by side (each waited for after)."""
        self.gateway = GatewayProcess(
            self.path, root=self.root, gateway_id="gw-live", log=self.logs / "gateway.log",
            overrides={**self.env, **self.scrape("gateway")},
        )  # fmt: skip
        self.mirror = MirrorProcess(
            self.path, root=self.root, name="m-live", log=self.logs / "mirror.log",
            overrides={**FAST_MIRROR, **self.env, **self.scrape("mirror")},
        )  # fmt: skip
        processes = [self.gateway, self.mirror, self._worker()]
        for process in processes:
            process.launch()
        for process in processes:
            process.wait_ready()
        return self

    def start_worker(self, dies_after: str = "") -> WorkerProcess:
        """Another worker; with ``dies_after``, one that kills itself once that step has done its work."""
        worker = self._worker(dies_after)
        worker.start()
        return worker

    def _worker(self, dies_after: str = "") -> WorkerProcess:
        name = f"worker-{len(self.workers) + 1}"
        worker = WorkerProcess(
            self.path, root=self.root, name=name, log=self.logs / f"{name}.log",
            overrides={**self.env, **self.scrape(name)}, dies_after=dies_after,
        )  # fmt: skip
        self.workers.append(worker)
        return worker

    def kill_worker(self) -> None:
        """kill -9 the newest worker, as a crash would."""
        self.workers[-1].stop(signal.SIGKILL)

    def stop(self) -> None:
        for process in [*self.workers, self.mirror, self.gateway]:
            if process is not None:
                process.stop()

    def cli(self, *args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "switchyard", "--config", str(self.path), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def follow_to_switched(self, saga: str, kind: str, keys: str) -> None:
        """Follow ``saga`` to its end: ``kind`` of ``keys``, switched."""
        done = self.cli("sagas", "show", saga, "--follow")
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{kind} switched: {keys}" in done.stdout

    def cli_together(self, *commands: tuple[str, ...], timeout_s: float = 240) -> list[tuple[int, str]]:
        """Several CLI commands at once (sagas of their own, each waited for): each one's exit code and
        output (stdout, then stderr)."""
        running = [self.cli_in_background(*command) for command in commands]
        done = []
        for process in running:
            out, err = process.communicate(timeout=timeout_s)
            done.append((process.returncode, out + err))
        return done

    def cli_in_background(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "switchyard", "--config", str(self.path), *args],
            env={**os.environ, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@contextmanager
def deployed(
    config: Config, root: str, ledger: Path, logs: Path, overrides: Mapping[str, str]
) -> Iterator[Live]:
    """A gateway, a mirror and a worker on ``root`` with ``overrides`` on top of the file, started, and
    stopped after (a module's ``live`` fixture)."""
    deployment = Live(config, root, ledger, logs, overrides=dict(overrides)).start()
    try:
        yield deployment
    finally:
        deployment.stop()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_for_approval(live: Live, saga: str, timeout_s: float = 60) -> str:
    """Until the saga waits for an approval (what ``sagas show`` prints); where it waits."""
    progress = progress_until(
        live, saga, "waited for an approval", lambda p: bool(p.awaiting_approval), timeout_s
    )
    assert progress.awaiting_approval is not None
    return progress.awaiting_approval


def progress_until(
    live: Live, saga: str, what: str, done: Callable[[Progress], bool], timeout_s: float = 60
) -> Progress:
    """The saga's progress once ``done`` says so; asked in-process every 0.2 s, as a CLI process a time
    would cost a second each (of CPU the other tests share)."""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = progress_of(live, saga)
        if isinstance(progress, Progress) and done(progress):
            return progress
        assert time.monotonic() < deadline, f"{saga} never {what}: {progress}"
        time.sleep(0.2)


def progress_of(live: Live, saga: str) -> Progress | Exception:
    """The saga's progress, asked once; the error where Temporal cannot say (the saga not started yet,
    Temporal restarting)."""
    from temporalio.service import RPCError

    from switchyard.errors import StackError

    async def asking() -> Progress:
        client = await temporal.connect(live.config)
        found: Progress = await client.get_workflow_handle(saga).query("progress", result_type=Progress)
        return found

    try:
        return asyncio.run(asking())
    except (RPCError, StackError) as exc:
        return exc


def terminate(live: Live, saga: str) -> bool:
    """End ``saga`` (and the children it runs) at once if it still runs, for a test that failed while it
    did: whether it ran. Its locks stay (see ``sagas unlock``)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    async def ending() -> bool:
        client = await temporal.connect(live.config)
        handle = client.get_workflow_handle(saga)
        try:
            if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
                return False
        except RPCError:  # never started
            return False
        await handle.terminate(reason="the test that started it ended")
        return True

    return asyncio.run(ending())


def capture(live: Live, workflow_id: str, run_id: str, name: str) -> None:
    """Write a saga's history for the replay tests when $SWITCHYARD_CAPTURE_HISTORIES asks for it."""
    directory = os.environ.get("SWITCHYARD_CAPTURE_HISTORIES")
    if not directory:
        return

    async def fetch() -> str:
        client = await temporal.connect(live.config)
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        return history.to_json()

    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{name}.json").write_text(asyncio.run(fetch()))


def readiness(port: int, cluster: str) -> tuple[int, str]:
    """A gateway's readiness as a load balancer probes it (``gateway.health_port``): the status, and
    what it says of ``cluster``."""
    status, said = ready_said(port)
    return status, said["clusters"][cluster]


def ready_said(port: int) -> tuple[int, dict[str, Any]]:
    """A gateway's ``/ready`` status and what it says (its routing epoch, its clusters)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


_PROCESS_LOGS = ("gateway*.log", "gw-*.log", "worker*.log", "mirror*.log", "webhook*.log")
_WARNED_LINES = 40


def process_warnings(config: object, *, since: float) -> str:
    """The WARNING and ERROR lines Switchyard's processes of this test session logged since ``since``
    (wall clock), the last few of each log."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return ""
    base = factory.getbasetemp()
    found = []
    for pattern in _PROCESS_LOGS:
        for log in sorted(base.rglob(pattern)):
            if log.stat().st_mtime < since:
                continue
            lines = [
                line[:600]
                for line in log.read_text(errors="replace").splitlines()
                if " WARNING " in line or " ERROR " in line
            ]
            if lines:
                found.append(f"--- {log.relative_to(base)}\n" + "\n".join(lines[-_WARNED_LINES:]))
    return "\n".join(found)
