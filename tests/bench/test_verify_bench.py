"""Records verified per minute, the same data in one run: on local[1] and local[2], and on a standalone
cluster with one worker and then two (one core each), with the scaling ratios.

200,000 records of 1 KiB in 4 partitions, written identically to both clusters, verified end to end
(spark-submit to verdict) and over the comparison stage alone (Spark's start-up excluded), in ranges of
at least 10,000 records: three per core, so 2 cores split each partition in two.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from switchyard.verify.submit import run_job, verdict, verify_spec
from tests.helpers.records import fill_topic
from tests.helpers.spark import SparkCluster

RECORDS = 200_000
PARTITIONS = 4
SIZE = 1024


def test_verification_scaling(routing: RoutingStore, stack_config: Config, tmp_path: Path) -> None:
    topic, link_id = f"verify-bench-{uuid.uuid4().hex[:6]}", f"verify-bench-{uuid.uuid4().hex[:6]}"
    for cluster in ("primary", "standby"):
        fill_topic(stack_config.clusters[cluster].bootstrap, topic, RECORDS, partitions=PARTITIONS, size=SIZE)
    routing.create_link(link_id, "primary", "standby", include=[topic], actor="user:bench", reason="bench")
    link = routing.link(link_id)
    assert link is not None
    spec = verify_spec(stack_config, link, groups=[])
    stack_config = stack_config.model_copy(  # Spark's own JVM settings, not the test suite's quicker ones
        update={"spark": stack_config.spark.model_copy(update={"range_records": 10_000, "submit_args": []})}
    )
    rows: list[tuple[str, ...]] = []
    rates: dict[str, float] = {}

    def measure(name: str, config: Config) -> None:
        job = run_job(config, spec)
        assert verdict(job.result) == "clean"
        assert sum(p["records"] for p in job.result["partitions"]) == RECORDS
        wall = (job.finished_at - job.started_at).total_seconds()
        stage = job.result["compare_seconds"]
        rates[name] = RECORDS / stage
        rows.append((name, str(job.result["ranges"]), f"{wall:.1f}", f"{RECORDS / wall * 60:,.0f}",
                     f"{stage:.1f}", f"{RECORDS / stage * 60:,.0f}"))  # fmt: skip

    def ratio(faster: str, slower: str) -> None:
        rows.append((f"{faster} / {slower}", "", "", "", "", f"{rates[faster] / rates[slower]:.2f}x"))

    for master in ("local[1]", "local[2]"):
        measure(master, with_master(stack_config, master))
    ratio("local[2]", "local[1]")
    cluster = SparkCluster.of(stack_config, tmp_path / "spark", workers=2)
    try:
        for workers in (1, 2):
            cluster.up(workers)
            measure(f"standalone, {workers} worker{'s' * (workers > 1)}", cluster.config)
    finally:
        cluster.down()
    ratio("standalone, 2 workers", "standalone, 1 worker")
    print(f"\nverification: {RECORDS:,} records of 1 KiB, {PARTITIONS} partitions, both clusters read")
    columns = ("where", "ranges", "job s", "records/min (job)", "compare s", "records/min (compare)")
    print(render(columns, rows))


def with_master(config: Config, master: str) -> Config:
    return config.model_copy(update={"spark": config.spark.model_copy(update={"master": master})})
