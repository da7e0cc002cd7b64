"""Bring the embedded stack up, report on it, and take down exactly what was brought up.

``up`` is idempotent: a service already running under our pid file is left alone, and a port held by a
process we did not start is an error rather than a second copy. When ``up`` fails, it stops what that
call started, so a failed start leaves nothing behind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from switchyard.config import Config
from switchyard.errors import PortInUseError, StackError
from switchyard.stack import health, services
from switchyard.stack.brokers import KafkaCluster
from switchyard.stack.class_archive import ensure_class_archive
from switchyard.stack.deployment import Deployment
from switchyard.stack.distribution import KafkaDistribution
from switchyard.stack.health import Health
from switchyard.stack.process import ManagedProcess
from switchyard.stack.services import Service

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    address: str
    pid: int | None
    health: Health
    link: str | None


class Stack:
    """The embedded stack described by one configuration."""

    def __init__(self, config: Config, *, only: Collection[str] | None = None) -> None:
        """``only``: the names of the services to run, where not all (a test's clusters alone)."""
        self.config = config
        self.state_dir = config.stack.state_dir
        self.services = [s for s in services.build(config) if only is None or s.name in only]

    def process(self, service: Service) -> ManagedProcess:
        return ManagedProcess(service.process_name, self.state_dir)

    def fetch(self, *, progress: Progress = lambda _: None) -> list[KafkaDistribution]:
        """Each Apache Kafka version the clusters run, resolved from Maven Central where it is not yet."""
        wanted = {KafkaCluster.from_config(self.config, c).dist for c in self.config.clusters}
        for dist in sorted(wanted, key=lambda d: d.version):
            if not dist.ready():
                progress(f"kafka {dist.version}: resolving its jars from Maven Central into {dist.folder}")
            dist.ensure()
            ensure_class_archive(dist, progress)
        return sorted(wanted, key=lambda d: d.version)

    def up(self, *, timeout_s: float = 90.0, progress: Progress = lambda _: None) -> list[ServiceStatus]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.fetch(progress=progress)
        started: list[Service] = []
        try:
            for service in self.services:
                if service.argv is None:
                    continue
                proc = self.process(service)
                if proc.pid() is not None:
                    progress(f"{service.name}: already running (pid {proc.pid()})")
                    continue
                if health.port_open(service.host, service.port):
                    raise PortInUseError(
                        f"{service.name}: {service.address} is in use by a process this stack did not "
                        f"start; stop it or change the port in {self.config.source or 'the configuration'}"
                    )
                try:
                    service.prepare()
                except OSError as exc:
                    raise StackError(f"{service.name}: cannot prepare its files: {exc}") from exc
                env = {**os.environ, **service.env} if service.env else None
                pid = proc.start(service.argv(), cwd=self.state_dir, env=env)
                started.append(service)
                progress(f"{service.name}: started (pid {pid}), log {proc.log_file}")
            self._wait_healthy(timeout_s, progress)
        except BaseException:
            for service in reversed(started):
                self.process(service).stop()
            raise
        return self.status()

    def down(self, *, progress: Progress = lambda _: None) -> list[str]:
        """Stop every process this stack's pid files name — Switchyard's own first (the demo's gateway,
        mirror and worker), then the services; return the names of those that were running."""
        stopped = Deployment(self.config).down(progress=progress) if self.config.source else []
        for service in reversed(self.services):
            if service.argv is not None and self.process(service).stop():
                stopped.append(service.name)
                progress(f"{service.name}: stopped")
        return stopped

    def status(self) -> list[ServiceStatus]:
        with ThreadPoolExecutor(max_workers=len(self.services)) as pool:
            healths = list(pool.map(lambda s: s.probe(), self.services))
        return [
            ServiceStatus(s.name, s.address, self.process(s).pid(), h, s.link)
            for s, h in zip(self.services, healths, strict=True)
        ]

    def _wait_healthy(self, timeout_s: float, progress: Progress) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(self.services)
        while pending:
            for service in list(pending):
                proc = self.process(service)
                if proc.pid() is None:
                    raise StackError(
                        f"{service.name}: exited during start-up; last lines of {proc.log_file}:\n"
                        f"{proc.log_tail()}"
                    )
                if service.probe().ok:
                    pending.remove(service)
                    progress(f"{service.name}: healthy at {service.address}")
            if pending and time.monotonic() > deadline:
                details = "; ".join(f"{s.name}: {s.probe().detail}" for s in pending)
                raise StackError(f"not healthy after {timeout_s:.0f}s: {details}")
            if pending:
                time.sleep(0.2)
