"""The PySpark job, run with spark-submit: ``job.py SPEC.json``. One Spark task per offset range of a
partition (:mod:`switchyard.verify.ranges`).

Modes (``spec["mode"]``):

- ``verify``: each task reads its source range and the matching target range with the Kafka client and
  matches them record by record, a task per partition settles what the ranges left
  (:mod:`switchyard.verify.compare`); the driver checks each group's target offset against the record
  that follows its last consumed source record;
- ``export``: each task reads its range of the old source (the lost window) and the rows are written
  to Parquet;
- ``republish``: the Parquet rows are written to the new primary, into the same topic and partition.

The result goes to ``spec["output"]`` as JSON; the submitting process reads it (and writes the ledger),
so the job needs nothing but the clusters. Progress lines (``progress: {"stages": [{"stage", "done",
"total", "failed"}], "records": n}``) go to stdout.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import Message

from switchyard.mirror.offsets import OffsetMap
from switchyard.verify.compare import Digested, PartitionFindings, RangeMatch, digest, match_range, settle
from switchyard.verify.ranges import range_size, split
from switchyard.verify.reading import read_range


def match_piece(piece: dict[str, Any], source: str, target: str) -> RangeMatch:
    """Exact matching over one offset range of a partition (:func:`switchyard.verify.ranges.split`)."""
    topic, partition = piece["topic"], piece["partition"]
    source_records = _digested(read_range(source, topic, partition, piece["source_from"], piece["source_to"]))
    target_records = _digested(read_range(target, topic, partition, piece["target_from"], piece["target_to"]))
    return match_range(source_records, list(target_records), _offset_map(piece))


def settle_partition(task: dict[str, Any], matches: Iterable[tuple[int, RangeMatch]]) -> dict[str, Any]:
    """The partition's findings from its ranges' matches (numbered in offset order)."""
    keys = ("topic", "partition", "source_from", "source_to", "target_from", "target_to")
    findings = PartitionFindings(*(task[k] for k in keys))
    in_order = [match for _, match in sorted(matches, key=lambda numbered: numbered[0])]
    return settle(findings, in_order, _offset_map(task)).to_dict()


def _offset_map(task: dict[str, Any]) -> OffsetMap:
    return OffsetMap([(s, t) for s, t in task["segments"]])


def _digested(messages: Iterable[Message]) -> Iterator[Digested]:
    for m in messages:
        yield Digested(m.offset() or 0, _digest_of(m), m.timestamp()[1])


def _digest_of(message: Message) -> bytes:
    return digest(message.key(), message.value(), message.headers())


def export_partition(task: dict[str, Any], source: str) -> list[tuple[Any, ...]]:
    return [
        (m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
         list(m.headers() or []))
        for m in read_range(source, task["topic"], task["partition"], task["source_from"], task["source_to"])
    ]  # fmt: skip


def check_group(check: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    """Does the group's target offset point at the copy of the record after its last consumed one?"""
    topic, partition, at = check["topic"], check["partition"], check["target_offset"]
    following = next(
        iter(read_range(source, topic, partition, check["source_offset"], check["source_end"])), None
    )
    at_target = next(iter(read_range(target, topic, partition, at, at + 1)), None)
    detail = ""
    if following is None:  # the group had read everything: it must be at the end on the target too
        if at != check["target_end"]:
            detail = f"consumed all on the source, but at {at} of {check['target_end']} on the target"
    elif at_target is None:
        detail = f"target offset {at} holds no record (the group reads source {following.offset()} next)"
    elif _digest_of(following) != _digest_of(at_target):
        detail = (
            f"target offset {at} holds another record than source {following.offset()}, which the group "
            f"reads next (expected target {check['expected']})"
        )
    return {**check, "ok": not detail, "detail": detail}


def main(argv: list[str]) -> int:
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    with open(argv[1], encoding="utf-8") as handle:
        spec = json.load(handle)
    # a bare context: the SQL session, seconds more to start, only where Parquet is read or written
    context = SparkContext(conf=SparkConf().setAppName(f"switchyard-{spec['mode']}-{spec.get('link', '')}"))
    context.setLogLevel("WARN")
    tasks = spec["partitions"]
    source, target = spec["source"], spec.get("target", "")
    stop = threading.Event()
    records = context.accumulator(0)
    reporter = threading.Thread(target=_report_progress, args=(context, records, stop), daemon=True)
    reporter.start()
    result: dict[str, Any] = {"mode": spec["mode"], "link": spec.get("link")}
    try:
        size = range_size(tasks, _cores(context, spec["master"]), spec["range_records"])
        pieces = [(i, j, piece) for i, task in enumerate(tasks) for j, piece in enumerate(split(task, size))]
        result["ranges"] = len(pieces)
        if spec["mode"] == "verify":
            started = time.perf_counter()
            settled = (
                context.parallelize(pieces, max(1, len(pieces)))
                .map(lambda p: (p[0], (p[1], _counted(match_piece(p[2], source, target), records))))
                .groupByKey(max(1, min(len(tasks), len(pieces))))
                .map(lambda numbered: (numbered[0], settle_partition(tasks[numbered[0]], numbered[1])))
                .collect()
            )
            result["partitions"] = [found for _, found in sorted(settled, key=lambda numbered: numbered[0])]
            result["compare_seconds"] = time.perf_counter() - started  # the work, Spark's start-up excluded
            result["groups"] = [check_group(g, source, target) for g in spec.get("groups", [])]
        elif spec["mode"] == "export":
            schema = StructType([
                StructField("topic", StringType()), StructField("partition", IntegerType()),
                StructField("offset", LongType()), StructField("timestamp", LongType()),
                StructField("key", BinaryType()), StructField("value", BinaryType()),
                StructField("headers", ArrayType(StructType([StructField("name", StringType()),
                                                             StructField("value", BinaryType())]))),
            ])  # fmt: skip
            rows = context.parallelize([piece for _, _, piece in pieces], max(1, len(pieces))).flatMap(
                lambda piece: _counted(export_partition(piece, source), records)
            )
            spark = SparkSession(context)
            frame = spark.createDataFrame(rows, schema)
            frame.write.mode("overwrite").parquet(spec["parquet"])
            counted = spark.read.parquet(spec["parquet"]).groupBy("topic", "partition").count().collect()
            result["exported"] = [
                {"topic": r["topic"], "partition": r["partition"], "records": r["count"]} for r in counted
            ]
        elif spec["mode"] == "republish":
            stored = SparkSession(context).read.parquet(spec["parquet"])
            stored = stored.orderBy("topic", "partition", "offset")
            result["republished"] = _republish(stored.toLocalIterator(), target, records)
        else:
            raise ValueError(f"unknown mode {spec['mode']!r}")
    finally:
        stop.set()
        reporter.join(5)
    with open(spec["output"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    context.stop()
    return 0


def _counted(found: Any, records: Any) -> Any:
    """A task's matches (or rows), with the records it went through added to the job's count."""
    records.add(found.records if isinstance(found, RangeMatch) else len(found))
    return found


def _cores(context: Any, master: str) -> int:
    """The executors' cores, to size the ranges by. On a cluster, executors register after the driver
    starts: wait for the first (nothing runs without one) and until no more arrive for a second."""
    if master.startswith("local") or context.getConf().contains("spark.default.parallelism"):
        return int(context.defaultParallelism)
    tracker = context._jsc.sc().statusTracker()
    deadline, seen, settled_at = time.monotonic() + 60, -1, time.monotonic()
    while time.monotonic() < deadline:
        executors = len(tracker.getExecutorInfos()) - 1  # the driver is listed too
        if executors != seen:
            seen, settled_at = executors, time.monotonic()
        elif executors > 0 and time.monotonic() - settled_at >= 1.0:
            break
        time.sleep(0.2)
    return int(context.defaultParallelism)


def _republish(rows: Iterable[Any], bootstrap: str, records: Any) -> int:
    """Produce the rows in order from here, the driver: one idempotent producer, so a retried Spark task
    cannot write a record twice."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []

    def failed(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    sent = 0
    for row in rows:
        headers = [(h["name"], h["value"]) for h in row["headers"] or []]
        while True:
            try:
                producer.produce(
                    row["topic"], row["value"], row["key"], partition=row["partition"],
                    timestamp=row["timestamp"], headers=headers, on_delivery=failed,
                )  # fmt: skip
                break
            except BufferError:  # the producer's queue is full: wait for deliveries
                producer.poll(0.5)
        producer.poll(0)
        sent += 1
        if sent % 1000 == 0:
            records.add(1000)
    records.add(sent % 1000)
    if producer.flush(60) or failures:
        raise RuntimeError(f"republish failed: {failures[:1] or 'records still in flight'}")
    return sent


def _report_progress(context: Any, records: Any, stop: threading.Event) -> None:
    """Once a second if something changed, and at the end: each running stage's tasks done and total,
    and the records compared (or read) so far by finished tasks, as ``progress: {json}`` lines."""
    tracker = context.statusTracker()
    last = None
    stopped = False
    while not stopped:  # and once more when the job is done: its final count
        stopped = stop.wait(1.0)
        stages = []
        for stage_id in sorted(tracker.getActiveStageIds()):
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                stages.append({"stage": stage_id, "done": info.numCompletedTasks, "total": info.numTasks,
                               "failed": info.numFailedTasks})  # fmt: skip
        now = {"stages": stages, "records": records.value}
        if now != last:
            print(f"progress: {json.dumps(now)}", flush=True)
            last = now


if __name__ == "__main__":
    sys.exit(main(sys.argv))
