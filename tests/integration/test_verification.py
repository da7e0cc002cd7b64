"""The Spark jobs on the two embedded clusters: seeded divergences found exactly; the lost window.

Copies are written directly (no mirror process) so each partition holds exactly the divergence the
test means, and nothing else.
"""

from __future__ import annotations

import json
import queue
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from switchyard import kafka
from switchyard.cli import cli
from switchyard.config import Config
from switchyard.mirror.control import promote_link
from switchyard.model import now
from switchyard.routing.store import RoutingStore
from switchyard.verify.submit import JobResult, Progress, VerificationError, run_job, verdict, verify_spec
from tests.helpers.records import RECENT_MS, commit_offset
from tests.helpers.spark import SparkCluster
from tests.integration.test_mirror import Mirrors, wait_drained

ACTOR = "user:test"
N = 50


def records(n: int, tag: str = "v") -> list[kafka.Record]:
    return [
        kafka.Record(f"k{i}".encode(), f"{tag}{i}".encode(), headers=(("h", b"x"),), timestamp=RECENT_MS + i)
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def seeded(routing: RoutingStore, stack_config: Config) -> tuple[str, str]:
    """A link whose topics each hold one kind of divergence on the target, and one clean topic."""
    prefix = f"v{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    topics = {kind: f"{prefix}-{kind}" for kind in ("clean", "missing", "extra", "altered", "shifted")}
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, list(topics.values()), partitions=1)
    for topic in topics.values():
        kafka.produce(primary, topic, records(N))
    kafka.produce(standby, topics["clean"], records(N))
    kafka.produce(standby, topics["missing"], records(N)[:-1])
    kafka.produce(standby, topics["extra"], [*records(N), kafka.Record(b"stray", b"stray")])
    altered = records(N)
    altered[20] = kafka.Record(
        b"k20", b"not what the source holds", headers=(("h", b"x"),), timestamp=altered[20].timestamp
    )
    kafka.produce(standby, topics["altered"], altered)
    # the first 5 in a transaction: its commit marker takes offset 5, so records 5.. sit one further on
    producer = Producer({"bootstrap.servers": standby, "transactional.id": f"tx-{prefix}"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for r in records(5):
        producer.produce(topics["shifted"], r.value, r.key, headers=list(r.headers), timestamp=r.timestamp)
    producer.commit_transaction(10)
    kafka.produce(standby, topics["shifted"], records(N)[5:])
    for group, target_offset in ((f"{prefix}-right", 30), (f"{prefix}-wrong", 28)):
        commit_offset(primary, group, topics["clean"], 30)
        commit_offset(standby, group, topics["clean"], target_offset)
    link = f"{prefix}-link"
    routing.create_link(link, "primary", "standby", include=[f"{prefix}-.*"], actor=ACTOR, reason="t")
    return link, prefix


@pytest.fixture(scope="module")
def seeded_spec(seeded: tuple[str, str], routing: RoutingStore, stack_config: Config) -> dict[str, Any]:
    link_id, prefix = seeded
    link = routing.link(link_id)
    assert link is not None
    return verify_spec(stack_config, link, groups=[f"{prefix}-right", f"{prefix}-wrong"])


@pytest.fixture(scope="module")
def verified_locally(seeded_spec: dict[str, Any], stack_config: Config) -> tuple[JobResult, list[Progress]]:
    progress: list[Progress] = []
    return run_job(stack_config, seeded_spec, on_progress=progress.append), progress


@pytest.fixture(scope="module")
def spark_cluster(stack_config: Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master and two workers of one core each, started as the embedded stack
    starts them."""
    cluster = SparkCluster.of(stack_config, tmp_path_factory.mktemp("spark"), workers=2)
    statuses = cluster.up()
    assert [s.name for s in statuses] == ["spark-master", "spark-worker-1", "spark-worker-2"]
    try:
        yield cluster
    finally:
        cluster.down()


def test_each_seeded_divergence_is_reported_exactly(
    seeded: tuple[str, str], verified_locally: tuple[JobResult, list[Progress]]
) -> None:
    _, prefix = seeded
    job, progress = verified_locally
    found = {p["topic"].removeprefix(f"{prefix}-"): p for p in job.result["partitions"]}

    def counts(kind: str) -> tuple[int, int, int, int, int]:
        p = found[kind]
        return (p["records"], p["missing"], p["extra"], p["mismatched"], p["misaligned"])

    assert counts("clean") == (N, 0, 0, 0, 0)
    assert counts("missing") == (N, 1, 0, 0, 0)
    assert counts("extra") == (N, 0, 1, 0, 0)
    assert counts("altered") == (N, 0, 0, 1, 0)
    assert counts("shifted") == (N, 0, 0, 0, N - 5)
    assert found["missing"]["examples"] == [f"source {N - 1}: not on the target (expected at {N - 1})"]
    assert found["altered"]["examples"] == ["source 20 -> target 20: key, value or headers differ"]
    assert found["shifted"]["examples"][0] == "source 5: copy at target 6, expected at 5"

    groups = {g["group"].removeprefix(f"{prefix}-"): g for g in job.result["groups"]}
    assert groups["right"]["ok"]
    assert not groups["wrong"]["ok"]
    assert "target offset 28 holds another record than source 30" in groups["wrong"]["detail"]
    assert verdict(job.result) == "diverged"
    assert progress[-1].records == sum(p["records"] for p in job.result["partitions"])  # the last word


def test_a_standalone_cluster_finds_exactly_what_local_finds_though_a_worker_dies(
    seeded_spec: dict[str, Any],
    verified_locally: tuple[JobResult, list[Progress]],
    spark_cluster: SparkCluster,
) -> None:
    """The job submitted to a real master (its code shipped with --py-files), each partition split into
    ranges of 5 records run by executors on two workers, one of which is killed mid-stage: Spark runs its
    tasks again on the other, and the findings are the same, partition by partition and group by group."""
    local, _ = verified_locally
    many = ["--conf", "spark.default.parallelism=20"]  # 60 ranges of 5 records: a stage of seconds
    base = spark_cluster.config.spark
    spark = base.model_copy(update={"submit_args": [*base.submit_args, *many], "range_records": 1})
    config = spark_cluster.config.model_copy(update={"spark": spark})
    progress: queue.Queue[Progress] = queue.Queue()
    with ThreadPoolExecutor(1) as pool:
        job = pool.submit(run_job, config, seeded_spec, on_progress=progress.put)
        seen: list[Progress] = []
        while not any(p.stages and 1 <= p.done <= p.total - 10 for p in seen):
            assert not job.done(), f"the job ended before a worker could be killed mid-stage: {seen}"
            seen.append(progress.get(timeout=120))
        spark_cluster.kill("spark-worker-1")
        on_cluster = job.result(timeout=240)
    while not progress.empty():
        seen.append(progress.get())
    assert on_cluster.master == config.spark.master
    assert on_cluster.result["ranges"] > 2 * len(seeded_spec["partitions"])  # locally: one per partition
    assert local.result["ranges"] == len(seeded_spec["partitions"])
    assert on_cluster.result["partitions"] == local.result["partitions"]
    assert on_cluster.result["groups"] == local.result["groups"]
    assert max(p.failed for p in seen) > 0  # the killed worker's tasks, run again
    assert seen[-1].records >= sum(p["records"] for p in local.result["partitions"])
    spark_cluster.up()  # and it comes back for the tests after this one


def test_a_clean_link_verifies_clean_through_the_cli(
    seeded: tuple[str, str], routing: RoutingStore, stack_config: Config, ledger_path: Path
) -> None:
    _, prefix = seeded
    clean = f"{prefix}-only-clean"
    routing.create_link(clean, "primary", "standby", include=[f"{prefix}-clean"], actor=ACTOR, reason="t")
    env = {
        "SWITCHYARD__ZOOKEEPER__ROOT": routing.layout.root,
        "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
    }
    result = CliRunner(env=env).invoke(
        cli, ["--config", str(stack_config.source), "verify", clean, "--group", f"{prefix}-right", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "clean"
    assert [(p["records"], p["present"]) for p in report["partitions"]] == [(N, N)]
    recorded = routing.ledger.verification(report["run"])
    assert recorded is not None
    assert (recorded["verdict"], recorded["records"], recorded["groups_checked"]) == ("clean", N, 1)


def test_a_spark_failure_carries_sparks_own_error(stack_config: Config) -> None:
    broken = stack_config.model_copy(
        update={"spark": stack_config.spark.model_copy(update={"master": "nonsense://nowhere"})}
    )
    spec = {"mode": "verify", "link": "x", "source": "", "target": "", "partitions": [], "groups": []}
    with pytest.raises(VerificationError, match="SparkException: Master must either be yarn or start with"):
        run_job(broken, spec)


@pytest.mark.timeout(600)  # 63-109 s beside two other modules, 193-234 s in the suite (2026-12-05)
def test_the_lost_window_is_found_exported_and_republished_once_on_the_cluster(
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    tmp_path: Path,
    spark_cluster: SparkCluster,
) -> None:
    """A real mirror copies 40 records and stops; 7 more reach the primary; the standby takes over.
    ``reconcile find`` on the standalone cluster exports the 7, in ranges of 2 records, and ``reconcile
    republish`` writes them to the standby in order, once. (On local[*], the failover saga's test
    measures the same window: test_failover.py.)"""
    topic, link = f"lw-{uuid.uuid4().hex[:6]}", f"lw-{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.create_topics(primary, [topic], partitions=1)
    kafka.produce(primary, topic, records(40))
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="t")
    mirrors = Mirrors(stack_config, routing, ledger_path, tmp_path)
    try:
        mirrors.start()
        wait_drained(routing, link, [(topic, 0)], since=now())
    finally:
        mirrors.stop_all()  # the primary's site goes dark: the mirror stops with it
    kafka.produce(primary, topic, records(7, "lost"))  # acknowledged to producers, never copied
    promote_link(stack_config, routing, link, actor=ACTOR, reason="failover")  # positions as they stand
    env = {
        "SWITCHYARD__ZOOKEEPER__ROOT": routing.layout.root,
        "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
        "SWITCHYARD__SPARK__MASTER": spark_cluster.config.spark.master,
        "SWITCHYARD__SPARK__RANGE_RECORDS": "2",
    }

    def run(*args: str) -> str:
        result = CliRunner(env=env).invoke(cli, ["--config", str(stack_config.source), *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    parquet = tmp_path / "lost"
    found = run("reconcile", "find", link, "--parquet", str(parquet))
    assert f"7 records written to {parquet}" in found
    run_id = found.split("(run ")[1].split(")")[0]
    recorded = routing.ledger.reconciliation(run_id)
    assert recorded is not None
    assert (recorded["records"], recorded["report"]["ranges"]) == (7, 4)  # offsets 40-46, two at a time
    republished = run("reconcile", "republish", run_id)
    assert republished.startswith("7 records written to standby")
    on_standby = kafka.read_partitions(standby, topic)[0]
    assert [r.value for r in on_standby[40:]] == [r.value for r in records(7, "lost")]

    again = CliRunner(env=env).invoke(
        cli, ["--config", str(stack_config.source), "reconcile", "republish", run_id]
    )
    assert again.exit_code != 0
    assert "already republished" in again.output
    assert len(kafka.read_partitions(standby, topic)[0]) == 47  # moved once
