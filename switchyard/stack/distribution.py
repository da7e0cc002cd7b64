"""Apache Kafka's jars for the embedded stack, resolved from Maven Central once per version.

There is no tarball to download here: Maven resolves the broker (``kafka_2.13``), its tools
(``kafka-tools``: the storage formatter, topic and ACL commands), the Java client and Kafka Streams (for
the test applications) into one folder of jars, like the release's ``libs/``, and ``java -cp 'DIR/*'
CLASS`` runs anything in it. The published POMs leave logging out (the release ships its binding beside
them), so the folder also gets Log4j 2 with its SLF4J 1.7 binding for 4.x, whose clients still log
through ``slf4j-api`` 1.7; 3.9.x brings reload4j and its binding with it.

A folder is complete once its ``complete`` marker is written, naming what it was resolved from, and only
then used: a resolution that fails leaves nothing behind (a process killed meanwhile leaves a scratch
folder, ``.<version>-*``), and processes resolving at once (test workers) take turns behind one lock, as
they share Maven's local repository; the second finds the first one's folder and asks Maven nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from switchyard.errors import StackError

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
LOG4J_VERSION = "2.25.3"
_COMPLETE = "complete"


@dataclass(frozen=True)
class KafkaDistribution:
    """One Apache Kafka version's jars under ``home/<version>/libs``."""

    version: str
    home: Path

    @property
    def folder(self) -> Path:
        return self.home / self.version

    @property
    def libs(self) -> Path:
        return self.folder / "libs"

    @property
    def classpath(self) -> str:
        return f"{self.libs}/*"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def class_archive(self, java: str) -> Path:
        """Where the broker's class-data archive for ``java`` (a binary's path) is kept: an archive is
        only good for the JVM build that made it (see :mod:`switchyard.stack.class_archive`)."""
        key = hashlib.sha256(os.path.realpath(java).encode()).hexdigest()[:12]
        return self.folder / f"broker-{key}.jsa"

    def ready(self) -> bool:
        marker = self.folder / _COMPLETE
        return marker.exists() and marker.read_text() == self._stamp()

    def ensure(self, *, timeout_s: float = 900.0) -> KafkaDistribution:
        """Resolve the jars unless a complete folder is there already; raise StackError naming what
        Maven could not find."""
        if self.ready():
            return self
        with self.locked():
            if not self.ready():
                self._resolve(timeout_s)
        return self

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The distributions' one lock (one for all versions: Maven's local repository is shared), held
        while a folder or an archive in it is made."""
        self.home.mkdir(parents=True, exist_ok=True)
        with (self.home / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _resolve(self, timeout_s: float) -> None:
        mvn = shutil.which("mvn")
        if mvn is None:
            raise StackError(f"kafka {self.version}: Maven (mvn) is missing; run `make setup`")
        work = Path(tempfile.mkdtemp(prefix=f".{self.version}-", dir=self.home))
        try:
            (work / "pom.xml").write_text(self.pom())
            argv = [mvn, "-B", "-q", "-f", str(work / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                    "-DincludeScope=runtime", f"-DoutputDirectory={work / 'libs'}"]  # fmt: skip
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                raise StackError(
                    f"kafka {self.version}: Maven did not resolve its jars in {timeout_s:.0f}s"
                ) from None
            if done.returncode != 0:
                said = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
                raise StackError(
                    f"kafka {self.version}: Maven could not resolve Apache Kafka {self.version} "
                    f"(is it a released version?):\n"
                    + "\n".join(said[:5] or [f"exit code {done.returncode}"])
                )
            (work / _COMPLETE).write_text(self._stamp())
            if self.folder.exists():  # an earlier attempt's leftovers
                shutil.rmtree(self.folder)
            os.replace(work, self.folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def _stamp(self) -> str:
        """What a complete folder was resolved from: a folder of an older list of artifacts (one without
        Kafka Streams) is resolved again."""
        return f"{self.version} {hashlib.sha256(self.pom().encode()).hexdigest()[:16]}\n"

    def artifacts(self) -> list[tuple[str, str, str]]:
        """(group, artifact, version) of what the folder holds, with what each depends on."""
        return [("org.apache.kafka", name, self.version)
                for name in ("kafka_2.13", "kafka-tools", "kafka-clients", "kafka-streams")]  # fmt: skip

    def pom(self) -> str:
        artifacts = self.artifacts()
        if self.major >= 4:
            artifacts += [("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
                          ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION)]  # fmt: skip
        dependencies = "\n".join(
            f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
            f"<version>{v}</version></dependency>"
            for g, a, v in artifacts
        )
        return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>switchyard.stack</groupId>
  <artifactId>apache-kafka</artifactId>
  <version>{self.version}</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

    def logging_options(self, config_dir: Path) -> list[str]:
        """JVM options that point the version's logging at a console configuration written to
        ``config_dir`` (Log4j 2 for 4.x, reload4j for 3.9): the process's output is its log."""
        config_dir.mkdir(parents=True, exist_ok=True)
        if self.major >= 4:
            path = config_dir / "log4j2.properties"
            path.write_text(_LOG4J2)
            return [f"-Dlog4j2.configurationFile={path}"]
        path = config_dir / "log4j.properties"
        path.write_text(_LOG4J1)
        return [f"-Dlog4j.configuration=file:{path}"]


_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.state.name = state.change.logger
logger.state.level = warn
logger.requests.name = kafka.request.logger
logger.requests.level = warn
"""

_LOG4J1 = """log4j.rootLogger=INFO, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""
