"""The PySpark job, run with spark-submit: ``job.py SPEC.json``. One Spark task per partition range.

Modes (``spec["mode"]``):

- ``verify``: each task reads its source range and the matching target range with the Kafka client and
  compares them record by record (:mod:`switchyard.verify.compare`); the driver checks each group's
  target offset against the record that follows its last consumed source record;
- ``export``: each task reads its range of the old source (the lost window) and the rows are written
  to Parquet;
- ``republish``: the Parquet rows are written to the new primary, into the same topic and partition.

The result goes to ``spec["output"]`` as JSON; the submitting process reads it (and writes the ledger),
so the job needs nothing but the clusters. Progress lines (``progress: done/total``) go to stdout.
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
from switchyard.verify.compare import Digested, PartitionFindings, compare_partition, digest
from switchyard.verify.reading import read_range


def verify_partition(task: dict[str, Any], source: str, target: str) -> dict[str, Any]:
    findings = PartitionFindings(
        task["topic"],
        task["partition"],
        task["source_from"],
        task["source_to"],
        task["target_from"],
        task["target_to"],
    )
    topic, partition = task["topic"], task["partition"]
    source_records = _digested(read_range(source, topic, partition, task["source_from"], task["source_to"]))
    target_records = list(
        _digested(read_range(target, topic, partition, task["target_from"], task["target_to"]))
    )
    offset_map = OffsetMap([(s, t) for s, t in task["segments"]])
    return compare_partition(findings, source_records, target_records, offset_map).to_dict()


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
    spark = SparkSession.builder.appName(f"switchyard-{spec['mode']}-{spec.get('link', '')}").getOrCreate()
    context = spark.sparkContext
    context.setLogLevel("WARN")
    tasks = spec["partitions"]
    source, target = spec["source"], spec.get("target", "")
    stop = threading.Event()
    reporter = threading.Thread(target=_report_progress, args=(context, len(tasks), stop), daemon=True)
    reporter.start()
    result: dict[str, Any] = {"mode": spec["mode"], "link": spec.get("link")}
    try:
        if spec["mode"] == "verify":
            rdd = context.parallelize(tasks, max(1, len(tasks)))
            started = time.perf_counter()
            result["partitions"] = rdd.map(lambda t: verify_partition(t, source, target)).collect()
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
            rows = context.parallelize(tasks, max(1, len(tasks))).flatMap(
                lambda t: export_partition(t, source)
            )
            frame = spark.createDataFrame(rows, schema)
            frame.write.mode("overwrite").parquet(spec["parquet"])
            counted = spark.read.parquet(spec["parquet"]).groupBy("topic", "partition").count().collect()
            result["exported"] = [
                {"topic": r["topic"], "partition": r["partition"], "records": r["count"]} for r in counted
            ]
        elif spec["mode"] == "republish":
            stored = spark.read.parquet(spec["parquet"]).orderBy("topic", "partition", "offset").collect()
            result["republished"] = _republish(stored, target)
        else:
            raise ValueError(f"unknown mode {spec['mode']!r}")
    finally:
        stop.set()
        reporter.join(5)
    with open(spec["output"], "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    spark.stop()
    return 0


def _republish(rows: list[Any], bootstrap: str) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failures: list[str] = []
    for row in rows:
        producer.produce(
            row["topic"], row["value"], row["key"], partition=row["partition"], timestamp=row["timestamp"],
            headers=[(h["name"], h["value"]) for h in row["headers"] or []],
            on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
        )  # fmt: skip
        producer.poll(0)
    if producer.flush(60) or failures:
        raise RuntimeError(f"republish failed: {failures[:1] or 'records still in flight'}")
    return len(rows)


def _report_progress(context: Any, total: int, stop: threading.Event) -> None:
    tracker = context.statusTracker()
    last = -1
    while not stop.wait(1.0):
        done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done = max(done, info.numCompletedTasks)
        if done != last:
            print(f"progress: {done}/{total}", flush=True)
            last = done


if __name__ == "__main__":
    sys.exit(main(sys.argv))
