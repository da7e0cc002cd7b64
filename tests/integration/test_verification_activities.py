"""The Spark job activities under a real Temporal server: result, cancellation, Spark's error text."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.deps import Deps
from activities.verification import VerificationActivities
from switchyard import kafka
from switchyard.config import Config, load_config
from switchyard.routing.store import RoutingStore
from switchyard.sagas import steps
from switchyard.sagas.steps import VerifyOutcome, VerifyRequest
from tests.helpers.processes import command_line, descendants
from tests.helpers.records import RECENT_MS

N = 30


@workflow.defn
class VerifyOnce:
    """A stand-in for the saga step: run the activity once, hand back what it returns."""

    @workflow.run
    async def run(self, request: VerifyRequest) -> VerifyOutcome:
        return await workflow.execute_activity(
            steps.VERIFY,
            request,
            result_type=VerifyOutcome,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=20),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


def config_file(
    stack_config: Config, routing: RoutingStore, ledger_path: Path, directory: Path, **spark: str
) -> Config:
    """The session stack's configuration with this module's routing root and ledger (and Spark settings)."""
    assert stack_config.source is not None
    data = yaml.safe_load(stack_config.source.read_text())
    data["zookeeper"]["root"] = routing.layout.root
    data["ledger"] = {"url": f"sqlite:///{ledger_path}"}
    data["spark"] = {**data["spark"], "master": "local[1]", **spark}
    path = directory / f"switchyard-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


@pytest.fixture
def clean_link(routing: RoutingStore, stack_config: Config) -> str:
    topic, link = f"act-{uuid.uuid4().hex[:6]}", f"act-{uuid.uuid4().hex[:6]}"
    for cluster in ("primary", "standby"):
        bootstrap = stack_config.clusters[cluster].bootstrap
        kafka.create_topics(bootstrap, [topic], partitions=1)
        kafka.produce(
            bootstrap,
            topic,
            [kafka.Record(b"k", f"v{i}".encode(), timestamp=RECENT_MS + i) for i in range(N)],
        )
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    return link


async def run_workflow(
    config: Config, request: VerifyRequest, *, cancel_when_running: bool = False
) -> VerifyOutcome:
    """Run the activity as the worker does: on dependencies built once from ``config``."""
    client = await Client.connect(config.temporal.address, namespace=config.temporal.namespace)
    queue = f"verify-{uuid.uuid4().hex[:6]}"
    deps = Deps.build(config)
    activities = [VerificationActivities(deps).verify_link]
    # the stand-in workflow lives next to test code that uses Kafka: not for the sandbox
    runner = UnsandboxedWorkflowRunner()
    try:
        async with Worker(
            client, task_queue=queue, workflows=[VerifyOnce], activities=activities, workflow_runner=runner
        ):
            handle = await client.start_workflow(
                VerifyOnce.run, request, id=f"verify-{request.run_id}", task_queue=queue
            )
            if cancel_when_running:
                deadline = time.monotonic() + 60
                while not job_processes():
                    assert time.monotonic() < deadline, "the Spark job never started"
                    await asyncio.sleep(0.2)
                await handle.cancel()
            return await handle.result()
    finally:
        deps.close()


def job_processes() -> list[int]:
    """The Spark jobs this test run started (other runs on the machine may have their own)."""
    return [pid for pid in descendants() if "switchyard/verify/job.py" in command_line(pid)]


def test_the_activity_verifies_and_records_once(
    clean_link: str, routing: RoutingStore, stack_config: Config, ledger_path: Path, tmp_path: Path
) -> None:
    request = VerifyRequest(str(uuid.uuid4()), clean_link)
    outcome = asyncio.run(run_workflow(config_file(stack_config, routing, ledger_path, tmp_path), request))
    assert (outcome.verdict, outcome.records, outcome.divergent_partitions) == ("clean", N, [])
    recorded = routing.ledger.verification(request.run_id)
    assert recorded is not None
    assert recorded["verdict"] == "clean"


def test_cancelling_the_saga_stops_the_spark_job(
    clean_link: str, routing: RoutingStore, stack_config: Config, ledger_path: Path, tmp_path: Path
) -> None:
    request = VerifyRequest(str(uuid.uuid4()), clean_link)
    config = config_file(stack_config, routing, ledger_path, tmp_path)
    with pytest.raises(WorkflowFailureError) as failed:
        asyncio.run(run_workflow(config, request, cancel_when_running=True))
    assert "cancel" in str(failed.value.cause).lower()
    deadline = time.monotonic() + 30
    while job_processes():
        assert time.monotonic() < deadline, f"the Spark job outlived its activity: {job_processes()}"
        time.sleep(0.2)
    assert routing.ledger.verification(request.run_id) is None  # nothing recorded for a stopped job


def test_a_failed_job_fails_the_activity_with_sparks_error(
    clean_link: str, routing: RoutingStore, stack_config: Config, ledger_path: Path, tmp_path: Path
) -> None:
    config = config_file(stack_config, routing, ledger_path, tmp_path, master="nowhere://at-all")
    request = VerifyRequest(str(uuid.uuid4()), clean_link)
    with pytest.raises(WorkflowFailureError) as failed:
        asyncio.run(run_workflow(config, request))
    cause = failed.value.cause  # the workflow's ActivityError, then the activity's ApplicationError
    while cause is not None and getattr(cause, "type", None) != "SparkJobFailed":
        cause = getattr(cause, "cause", None)
    assert cause is not None, f"no SparkJobFailed in {failed.value!r}"
    assert "SparkException: Master must either be yarn or start with" in str(cause)
    assert getattr(cause, "non_retryable", False)
