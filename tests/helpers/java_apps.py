"""The Java test applications (``tests/compat/java``), compiled once per checkout and Kafka release: a
single-file source launch compiles in the JVM it starts, 1.5 s of CPU and 1.2 s of waiting each time on
the testbed, and the suite starts dozens of them."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from switchyard.config import DEFAULT_KAFKA_VERSION
from switchyard.stack.distribution import KafkaDistribution
from tests.helpers.stacks import KAFKA_DIST

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "tests" / "compat" / "java"
CLASSES = ROOT / ".state" / "java-apps"
JVM = ["java", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
"""A small JVM on the client compiler: the applications are light and live for a test."""


def java_app(name: str) -> list[str]:
    """The command that runs ``tests/compat/java/<name>.java`` on the Java client of the stack's Kafka
    version, compiled on first use (one process compiles, the suite's others wait for it)."""
    classpath = KafkaDistribution(DEFAULT_KAFKA_VERSION, KAFKA_DIST).classpath
    source = SOURCES / f"{name}.java"
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:12]
    classes = CLASSES / f"{name}-{digest}"
    if not (classes / f"{name}.class").exists():
        CLASSES.mkdir(parents=True, exist_ok=True)
        with (CLASSES / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (classes / f"{name}.class").exists():
                _compile(source, classpath, classes)
    return [*JVM, "-cp", f"{classes}{os.pathsep}{classpath}", name]


def _compile(source: Path, classpath: str, classes: Path) -> None:
    """javac into a folder of its own, renamed into place whole: a compile cut short leaves nothing."""
    building = Path(tempfile.mkdtemp(prefix=f"{source.stem}-", dir=CLASSES))
    try:
        compiled = subprocess.run(["javac", "-nowarn", "-d", str(building), "-cp", classpath, str(source)],
                                  capture_output=True, text=True, check=False)  # fmt: skip
        if compiled.returncode != 0:
            raise RuntimeError(f"javac {source.name} failed:\n{compiled.stdout}{compiled.stderr}")
        building.rename(classes)
    finally:
        shutil.rmtree(building, ignore_errors=True)
