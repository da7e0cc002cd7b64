"""Preparing, submitting and recording the Spark jobs: what the CLI and the saga activities call.

A job gets everything it needs in a JSON spec (clusters, partition ranges, offset maps, group offsets),
runs under ``spark-submit`` on ``spark.master`` (``local[*]`` by default; on a cluster its own code goes
with it, ``--py-files``), reports its progress (:class:`Progress`), and writes its result to a JSON file
that is then read back here and recorded in the ledger.
A job that fails raises :class:`VerificationError` with Spark's own error lines; a job whose caller is
cancelled is killed (its whole process group).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
import zipfile
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.errors import BindingRefused, SwitchyardError
from switchyard.mirror.groups import committed_offsets, list_groups
from switchyard.mirror.mapstore import read_link
from switchyard.mirror.offsets import OffsetMap
from switchyard.model import Link, LinkState, now

JOB = Path(__file__).with_name("job.py")
Key = tuple[str, int]


class VerificationError(SwitchyardError):
    """The Spark job failed or was cancelled; the message carries Spark's error text."""


@dataclass(frozen=True)
class Progress:
    """Where a job is: each running stage's tasks done, in all and failed, and the records its finished
    tasks compared (or read). What the CLI draws as a bar and the activity sends as heartbeat details."""

    stages: tuple[tuple[int, int, int, int], ...] = ()
    """(stage id, tasks done, tasks in the stage, task attempts failed: Spark runs those again)."""
    records: int = 0

    @property
    def done(self) -> int:
        return sum(stage[1] for stage in self.stages)

    @property
    def total(self) -> int:
        return sum(stage[2] for stage in self.stages)

    @property
    def failed(self) -> int:
        return sum(stage[3] for stage in self.stages)

    def details(self) -> dict[str, Any]:
        return {
            "stages": [{"stage": s, "done": d, "total": t, "failed": f} for s, d, t, f in self.stages],
            "tasks_done": self.done, "tasks_total": self.total, "tasks_failed": self.failed,
            "records": self.records,
        }  # fmt: skip

    def __str__(self) -> str:
        stages = ", ".join(f"stage {stage[0]}" for stage in self.stages) or "between stages"
        failed = f", {self.failed} failed and retried" if self.failed else ""
        return f"{self.done}/{self.total} tasks ({stages}){failed}, {self.records:,} records"

    @classmethod
    def parse(cls, line: str) -> Progress | None:
        """The progress a job's output line reports, or None for any other line."""
        if not line.startswith(_PROGRESS):
            return None
        try:
            raw = json.loads(line[len(_PROGRESS) :])
            stages = tuple(
                (int(s["stage"]), int(s["done"]), int(s["total"]), int(s["failed"])) for s in raw["stages"]
            )
            return cls(stages, int(raw["records"]))
        except (ValueError, KeyError, TypeError):
            return None


_PROGRESS = "progress: "


@dataclass(frozen=True)
class JobResult:
    result: dict[str, Any]
    started_at: datetime
    finished_at: datetime
    master: str


def verify_spec(
    config: Config, link: Link, *, topics: Iterable[str] = (), groups: Iterable[str] | None = None
) -> dict[str, Any]:
    """What to compare: every partition of the link's topics (or ``topics``), from the source's log
    start to its end now, against the target up to its end now; and the groups' offsets."""
    source = config.clusters[link.source].bootstrap
    target = config.clusters[link.target].bootstrap
    wanted = set(topics)
    keys = kafka.partitions(source, lambda name: link.copies(name) and (not wanted or name in wanted))
    if not keys:
        raise BindingRefused(f"link {link.id}: no topic to verify on {link.source}")
    maps = read_link(target, link.id).maps
    source_starts, source_ends = kafka.bounds_of(source, keys)
    target_ends = kafka.ends_of(target, keys)
    partitions = []
    for key in keys:
        offset_map = maps.get(key, OffsetMap())
        partitions.append({
            "topic": key[0], "partition": key[1],
            "source_from": source_starts[key], "source_to": source_ends[key],
            "target_from": offset_map.position(source_starts[key]), "target_to": target_ends[key],
            "segments": offset_map.segments,
        })  # fmt: skip
    checks = _group_checks(
        maps, groups, source=source, target=target, source_ends=source_ends, target_ends=target_ends
    )
    return {"mode": "verify", "link": link.id, "source": source, "target": target, "partitions": partitions,
            "groups": checks}  # fmt: skip


def lost_window_spec(config: Config, link: Link, parquet: str) -> dict[str, Any]:
    """The records on the link's source beyond what was copied: from each partition's final copied
    position (stored at promotion; for a link not promoted yet, where the target's copy ends) to the
    source's end now."""
    source = config.clusters[link.source].bootstrap
    target = config.clusters[link.target].bootstrap
    stored = read_link(target, link.id)
    keys = kafka.partitions(source, link.copies)
    source_ends = kafka.ends_of(source, keys)
    copied = {k: stored.ends[k][0] for k in keys if k in stored.ends}
    unknown = [k for k in keys if k not in copied]
    if unknown and link.state is LinkState.PROMOTED:
        names = ", ".join(f"{t}[{p}]" for t, p in unknown[:5])
        raise BindingRefused(
            f"link {link.id} was promoted without storing final positions for {names} (promote with "
            "`switchyard links promote`): its target has been written to since, so the copy's end is unknown"
        )
    if unknown:  # never promoted: only the mirror writes the target, its end is where the copy ends
        target_ends = kafka.ends_of(target, unknown)
        for key in unknown:
            copied[key] = stored.maps.get(key, OffsetMap()).next_source(target_ends[key])
    partitions = [
        {"topic": k[0], "partition": k[1], "source_from": copied[k], "source_to": source_ends[k]}
        for k in keys
        if source_ends[k] > copied[k]
    ]
    return {"mode": "export", "link": link.id, "source": source, "partitions": partitions, "parquet": parquet}


def run_job(
    config: Config,
    spec: dict[str, Any],
    *,
    on_progress: Callable[[Progress], None] = lambda _progress: None,
    cancelled: threading.Event | None = None,
) -> JobResult:
    """Submit the job, relay its progress, wait; raise VerificationError with Spark's error text."""
    started = now()
    with tempfile.TemporaryDirectory(prefix="switchyard-job-") as work:
        spec_path, output = Path(work) / "spec.json", Path(work) / "result.json"
        spec_path.write_text(
            json.dumps({**spec, "output": str(output), "master": config.spark.master,
                        "range_records": config.spark.range_records}),
            encoding="utf-8",
        )  # fmt: skip
        shipped = [] if config.spark.master.startswith("local") else ["--py-files", _package(Path(work))]
        argv = [
            _spark_submit(),
            "--master",
            config.spark.master,
            *shipped,
            *config.spark.submit_args,
            str(JOB),
            str(spec_path),
        ]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
        errors: deque[str] = deque(maxlen=40)
        readers = [
            threading.Thread(target=_relay, args=(process.stdout, _progress_of(on_progress)), daemon=True),
            threading.Thread(target=_relay, args=(process.stderr, errors.append), daemon=True),
        ]
        for reader in readers:
            reader.start()
        while process.poll() is None:
            if cancelled is not None and cancelled.wait(0.5):
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                raise VerificationError(f"the {spec['mode']} job was cancelled and stopped")
            if cancelled is None:
                process.wait()
        for reader in readers:
            reader.join(5)
        if process.returncode != 0 or not output.exists():
            raise VerificationError(
                f"the {spec['mode']} job failed (spark-submit exit {process.returncode}):\n"
                + _spark_error(errors)
            )
        result = json.loads(output.read_text(encoding="utf-8"))
    return JobResult(result, started, now(), config.spark.master)


def verdict(result: dict[str, Any]) -> str:
    partitions_clean = all(
        not (p["missing"] or p["extra"] or p["mismatched"] or p["misaligned"]) for p in result["partitions"]
    )
    return "clean" if partitions_clean and all(g["ok"] for g in result.get("groups", [])) else "diverged"


def new_run_id() -> str:
    return str(uuid.uuid4())


def _group_checks(
    maps: dict[Key, OffsetMap],
    groups: Iterable[str] | None,
    *,
    source: str,
    target: str,
    source_ends: dict[Key, int],
    target_ends: dict[Key, int],
) -> list[dict[str, Any]]:
    """Each group's offsets on the copied partitions, with where the map says they must be."""
    source_admin, target_admin = (ClusterAdmin(b) for b in (source, target))
    checks = []
    for group in list_groups(source_admin) if groups is None else groups:
        committed = committed_offsets(source_admin, group)
        on_target = committed_offsets(target_admin, group)
        for key, offset in sorted(committed.items()):
            if key not in source_ends or offset < 0:
                continue
            checks.append({
                "group": group, "topic": key[0], "partition": key[1], "source_offset": offset,
                "source_end": source_ends[key], "target_offset": on_target.get(key, -1),
                "target_end": target_ends[key],
                "expected": maps.get(key, OffsetMap()).position(offset, target_ends[key]),
            })  # fmt: skip
    return checks


def _spark_submit() -> str:
    beside = Path(sys.executable).with_name("spark-submit")
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if found is None:
        raise VerificationError("spark-submit not found (install pyspark, or put Spark's bin on PATH)")
    return found


def _package(work: Path) -> str:
    """The ``switchyard`` package as a zip for the executors: on a cluster, the workers have Python and
    the Kafka client, not this project (the job imports its comparison and reading code)."""
    package = Path(__file__).resolve().parents[1]
    archive = work / "switchyard.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as out:
        for path in sorted(package.rglob("*.py")):
            out.write(path, str(path.relative_to(package.parent)))
    return str(archive)


def _progress_of(sink: Callable[[Progress], None]) -> Callable[[str], None]:
    def relay(line: str) -> None:
        progress = Progress.parse(line)
        if progress is not None:
            sink(progress)

    return relay


def _relay(stream: Any, sink: Callable[[str], None]) -> None:
    for line in stream:
        sink(line.rstrip("\n"))


def _spark_error(lines: Iterable[str]) -> str:
    """Spark's own explanation: the exception lines if there are any, else the last lines."""
    kept = list(lines)
    errors = [line for line in kept if "Error" in line or "Exception" in line]
    return "\n".join(errors[-10:] or kept[-15:])
