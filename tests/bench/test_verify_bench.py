"""Records verified per second on local[1] and local[2], the same data, in one run (scaling ratio).

200,000 records of 1 KiB in 4 partitions, written identically to both clusters, verified end to end
(spark-submit to verdict) and over the comparison stage alone (Spark's start-up excluded).
"""

from __future__ import annotations

import uuid

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from switchyard.verify.submit import run_job, verdict, verify_spec
from tests.helpers.records import fill_topic

RECORDS = 200_000
PARTITIONS = 4
SIZE = 1024


def test_verification_scaling(routing: RoutingStore, stack_config: Config) -> None:
    topic, link_id = f"verify-bench-{uuid.uuid4().hex[:6]}", f"verify-bench-{uuid.uuid4().hex[:6]}"
    for cluster in ("primary", "standby"):
        fill_topic(stack_config.clusters[cluster].bootstrap, topic, RECORDS, partitions=PARTITIONS, size=SIZE)
    routing.create_link(link_id, "primary", "standby", include=[topic], actor="user:bench", reason="bench")
    link = routing.link(link_id)
    assert link is not None
    spec = verify_spec(stack_config, link, groups=[])
    rows, rates = [], {}
    for master in ("local[1]", "local[2]"):
        config = stack_config.model_copy(
            update={"spark": stack_config.spark.model_copy(update={"master": master})}
        )
        job = run_job(config, spec)
        assert verdict(job.result) == "clean"
        assert sum(p["records"] for p in job.result["partitions"]) == RECORDS
        wall = (job.finished_at - job.started_at).total_seconds()
        stage = job.result["compare_seconds"]
        rates[master] = RECORDS / stage
        rows.append(
            (
                master,
                f"{wall:.1f}",
                f"{RECORDS / wall * 60:,.0f}",
                f"{stage:.1f}",
                f"{RECORDS / stage * 60:,.0f}",
            )
        )
    rows.append(("local[2]/local[1]", "", "", "", f"{rates['local[2]'] / rates['local[1]']:.2f}x"))
    print(f"\nverification: {RECORDS:,} records of 1 KiB, {PARTITIONS} partitions, both clusters read")
    print(render(("master", "job s", "records/min (job)", "compare s", "records/min (compare)"), rows))
