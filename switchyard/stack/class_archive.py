"""The broker's class-data archive (AppCDS), made once per Kafka version and JVM build.

A JVM that maps an archive of the classes a broker loads skips finding, parsing and verifying them:
on the testbed a broker then starts on 2.3 s of CPU instead of 4.2 s, ready in 1.7 s instead of 3.5 s.
The suite starts some forty brokers on two cores, so that is minutes. The archive is made by a
throwaway broker started with ``-XX:ArchiveClassesAtExit`` and stopped once it answers (the JVM writes
the archive as it exits), into a scratch name renamed into place when whole. Brokers map it when it is
there (:meth:`KafkaCluster.argv`); one that cannot be made is noted once (``.failed`` beside it) and
brokers start without it, as before.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from switchyard.stack.brokers import KafkaCluster, free_addresses
from switchyard.stack.distribution import KafkaDistribution
from switchyard.stack.services import brokers

_READY_S = 90.0
_EXIT_S = 30.0


def ensure_class_archive(
    dist: KafkaDistribution, progress: Callable[[str], None] = lambda _: None
) -> Path | None:
    """The archive for ``dist`` and the ``java`` on the path, made if missing; None if it cannot be
    (no Java, or the making failed before: see its ``.failed`` note)."""
    java = shutil.which("java")
    if java is None:
        return None
    archive = dist.class_archive(java)
    failed = archive.with_suffix(".failed")
    if archive.exists():
        return archive
    if failed.exists():
        return None
    with dist.locked():
        if archive.exists() or failed.exists():
            return archive if archive.exists() else None
        progress(f"kafka {dist.version}: archiving the broker's classes for faster starts (once)")
        try:
            _make(dist, archive)
        except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
            failed.write_text(f"{exc}\n")
            return None
    return archive


def _make(dist: KafkaDistribution, archive: Path) -> None:
    with tempfile.TemporaryDirectory(prefix=".archive-", dir=dist.home) as work:
        scratch = Path(work) / archive.name
        client, controller = free_addresses("127.0.0.1", 2)  # held together: never the same port twice
        cluster = KafkaCluster(
            cluster_id="archive",
            dist=dist,
            addresses=[client],
            controllers=[controller],
            home=Path(work) / "kafka",
            heap="256m",
            jvm_options=[f"-XX:ArchiveClassesAtExit={scratch}"],
        )
        (service,) = brokers(cluster)
        service.prepare()
        assert service.argv is not None
        log = (Path(work) / "broker.log").open("w")
        process = subprocess.Popen(
            service.argv(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + _READY_S
            while not service.probe().ok:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the archiving broker did not start (exit code {process.poll()})")
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            process.wait(_EXIT_S)
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()
            log.close()
        if not scratch.exists():
            raise RuntimeError("the archiving broker exited without writing its archive")
        scratch.replace(archive)
