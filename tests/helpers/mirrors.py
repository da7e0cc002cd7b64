"""Mirror processes of a test module's own, and waiting for what they copy."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from pathlib import Path

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.mirror.groups import committed_offsets
from switchyard.mirror.status import DrainReport, drain_report
from switchyard.routing.store import RoutingStore
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.processes import MirrorProcess


class Mirrors:
    """Starts mirror processes for this module's routing root; stops whatever is left at the end."""

    def __init__(self, config: Config, routing: RoutingStore, ledger_path: Path, logs: Path) -> None:
        self.config, self.routing, self.ledger_path, self.logs = config, routing, ledger_path, logs
        self.running: list[MirrorProcess] = []
        self.otlp = OtlpReceiver()

    def start(self, name: str = "m1", **overrides: str) -> MirrorProcess:
        assert self.config.source is not None
        process = MirrorProcess(
            self.config.source,
            root=self.routing.layout.root,
            name=name,
            log=self.logs / f"{name}.log",
            overrides={
                "SWITCHYARD__LEDGER__URL": f"sqlite:///{self.ledger_path}",
                "SWITCHYARD__MIRROR__TOPIC_REFRESH_S": "1",
                "SWITCHYARD__MIRROR__STATUS_INTERVAL_S": "0.5",
                "SWITCHYARD__MIRROR__GROUP_SYNC_INTERVAL_S": "1",
                "SWITCHYARD__MIRROR__CONSUMER": "{session.timeout.ms: 6000}",
                "SWITCHYARD__TELEMETRY__OTLP_ENDPOINT": self.otlp.endpoint,
                "SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S": "0.5",
                **overrides,
            },
        )
        process.start()
        self.running.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.running:
            process.stop()
        self.otlp.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def records(n: int, tag: str = "r") -> list[kafka.Record]:
    return [
        kafka.Record(f"k{i}".encode(), f"{tag}-{i}".encode() * 8, headers=(("h", str(i).encode()),))
        for i in range(n)
    ]


def wait_drained(
    routing: RoutingStore,
    link: str,
    partitions: list[tuple[str, int]],
    since: datetime,
    timeout_s: float = 60,
) -> DrainReport:
    deadline = time.monotonic() + timeout_s
    while True:
        report = drain_report(routing.zk, routing.layout, link, since=since, partitions=partitions)
        if report.drained:
            return report
        assert time.monotonic() < deadline, f"link {link} not drained: {report.waiting}"
        time.sleep(0.25)


def wait_group_offset(bootstrap: str, group: str, topic: str, expected: int, timeout_s: float = 30) -> int:
    """Wait until ``group`` has ``expected`` committed on ``topic``[0] of ``bootstrap``."""
    admin = ClusterAdmin(bootstrap)
    deadline = time.monotonic() + timeout_s
    found = None
    while time.monotonic() < deadline:
        found = committed_offsets(admin, group).get((topic, 0))
        if found == expected:
            return found
        time.sleep(0.3)
    raise AssertionError(f"group {group} on the target: {topic}[0] at {found}, expected {expected}")
