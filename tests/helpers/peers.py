"""What the benches' peers (MirrorMaker 2, Kroxylicious) share: their jars from Maven Central, resolved
like the brokers', and how their JVM is stopped."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from switchyard.stack.distribution import KafkaDistribution


@dataclass(frozen=True)
class PeerDistribution(KafkaDistribution):
    """One artifact's jars, with what it depends on, under ``home/<artifact>-<version>/libs``."""

    group: str = ""
    artifact: str = ""

    @property
    def folder(self) -> Path:
        return self.home / f"{self.artifact}-{self.version}"

    def artifacts(self) -> list[tuple[str, str, str]]:
        return [(self.group, self.artifact, self.version)]


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not ended in 30 s."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
