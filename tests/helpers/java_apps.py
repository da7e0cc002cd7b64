"""The Java test applications (``tests/compat/java``), compiled once per checkout and Kafka release: a
single-file source launch compiles in the JVM it starts, 1.5 s of CPU and 1.2 s of waiting each time on
the testbed, and the suite starts dozens of them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from switchyard.config import DEFAULT_KAFKA_VERSION
from switchyard.stack.distribution import KafkaDistribution
from tests.helpers.built import built_once
from tests.helpers.stacks import KAFKA_DIST

SOURCES = Path(__file__).resolve().parents[1] / "compat" / "java"
JVM = [
    "java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    f"-Dlog4j2.configurationFile={SOURCES / 'log4j2.properties'}",
]  # fmt: skip
"""A small JVM on the client compiler (the applications are light and live for a test), its client's
log as ``log4j2.properties`` says."""


def java_app(name: str) -> list[str]:
    """The command that runs ``tests/compat/java/<name>.java`` on the Java client of the stack's Kafka
    version, compiled on first use."""
    classpath = KafkaDistribution(DEFAULT_KAFKA_VERSION, KAFKA_DIST).classpath
    source = SOURCES / f"{name}.java"

    def compile_into(classes: Path) -> None:
        compiled = subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", classpath, str(source)],
                                  capture_output=True, text=True, check=False)  # fmt: skip
        if compiled.returncode != 0:
            raise RuntimeError(f"javac {source.name} failed:\n{compiled.stdout}{compiled.stderr}")

    classes = built_once("java-apps", name, source.read_bytes() + classpath.encode(), compile_into)
    return [*JVM, "-cp", f"{classes}{os.pathsep}{classpath}", name]
