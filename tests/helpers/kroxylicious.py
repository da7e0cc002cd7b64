"""Kroxylicious, the Kafka proxy, as a plain pass-through beside the gateway in the relay bench.

``io.kroxylicious:kroxylicious-app`` (its command line) is not on Maven Central as served here at any
version (2026-11-30: its metadata answers 404); ``kroxylicious-runtime`` is, up to 0.12.0, and a launcher
of our own (``java/KroxyliciousProxy.java``) starts its proxy. No filter is configured: it forwards.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.helpers.peers import PeerDistribution, stop_process

KROXYLICIOUS_VERSION = "0.12.0"
LAUNCHER = Path(__file__).resolve().parent / "java" / "KroxyliciousProxy.java"


class Kroxylicious:
    """One proxy in front of ``target``: clients bootstrap at ``port``, brokers at the ports after it."""

    def __init__(self, home: Path, work: Path, *, target: str, port: int, brokers: int = 3) -> None:
        runtime = PeerDistribution(KROXYLICIOUS_VERSION, home, "io.kroxylicious", "kroxylicious-runtime")
        self.dist = runtime.ensure()
        self.work, self.target, self.port, self.brokers = work, target, port, brokers
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def configuration(self) -> str:
        return (
            "virtualClusters:\n"
            "  bench:\n"
            f"    targetCluster: {{bootstrapServers: '{self.target}'}}\n"
            "    clusterNetworkAddressConfigProvider:\n"
            "      type: PortPerBrokerClusterNetworkAddressConfigProvider\n"
            f"      config: {{bootstrapAddress: '{self.bootstrap}', numberOfBrokerPorts: {self.brokers}}}\n"
            "    logNetwork: false\n"
            "    logFrames: false\n"
        )

    def start(self, timeout_s: float = 60.0) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        config = self.work / "kroxylicious.yaml"
        config.write_text(self.configuration())
        log = self.work / "kroxylicious.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                ["java", "-Xmx512m", "-cp", self.dist.classpath, str(LAUNCHER), str(config)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while b"kroxylicious proxy listening" not in log.read_bytes():
            tail = log.read_text(errors="replace")[-2000:]
            assert self.process.poll() is None, f"Kroxylicious ended:\n{tail}"
            assert time.monotonic() < deadline, f"Kroxylicious did not start in {timeout_s:.0f}s:\n{tail}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.process = None
