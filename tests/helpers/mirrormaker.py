"""MirrorMaker 2 in dedicated mode, run beside our mirror in the benches (the peer a user would compare).

Configured as a user who wants the best failover would: checkpoints and group offsets synced every
second, ``offset.lag.max`` 0 (an offset sync for every record), topics listed every second. Its jars
come from Maven Central like the brokers' (``connect-mirror`` and what it depends on).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.peers import PeerDistribution, stop_process
from tests.helpers.processes import cpu_seconds

MM2_VERSION = "4.3.1"
"""``connect-mirror`` 4.4.0 is not on Maven Central as served here (2026-11-30: "Could not find
artifact"); 4.3.1 is, and its clients speak to 4.4 brokers."""
IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
DEFAULT = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
INTERNAL = ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic", "offset.storage",
            "status.storage", "config.storage")  # fmt: skip
"""MirrorMaker's own topics, each with a replication factor of its own to set."""
MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"


class MirrorMaker:
    """One dedicated MirrorMaker 2 process copying ``topics`` (a regex) from source to target."""

    def __init__(
        self, home: Path, work: Path, *, source: str, target: str, topics: str, policy: str = IDENTITY
    ) -> None:
        self.dist = PeerDistribution(MM2_VERSION, home, "org.apache.kafka", "connect-mirror").ensure()
        self.work = work
        self.source, self.target, self.topics, self.policy = source, target, topics, policy
        self.process: subprocess.Popen[bytes] | None = None

    def properties(self) -> str:
        settings = {
            "clusters": "primary, standby",
            "primary.bootstrap.servers": self.source,
            "standby.bootstrap.servers": self.target,
            "primary->standby.enabled": "true",
            "standby->primary.enabled": "false",
            "primary->standby.topics": self.topics,
            "primary->standby.groups": ".*",
            "replication.policy.class": self.policy,
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1",
            "offset.lag.max": "0",
            "refresh.topics.interval.seconds": "1",
            "refresh.groups.interval.seconds": "1",
            "sync.topic.acls.enabled": "false",  # the bench's brokers have no authorizer
            "replication.factor": "1",  # one broker per cluster here, for its topics and the copies
            **{f"{name}.replication.factor": "1" for name in INTERNAL},
        }
        return "".join(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "mm2.properties"
        config.write_text(self.properties())
        logging = self.dist.logging_options(self.work)
        argv = ["java", "-Xmx512m", *logging, "-cp", self.dist.classpath, MAIN, str(config)]
        with (self.work / "mirrormaker.log").open("ab") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def cpu_s(self) -> float:
        assert self.process is not None
        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        """At once, as when its source cluster dies: it copies nothing more."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        path = self.work / "mirrormaker.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
