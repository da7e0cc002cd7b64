"""The session stack: every service healthy on the free ports chosen for this run, and really usable."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from switchyard import kafka
from switchyard.config import Config, split_hostport
from switchyard.stack import Stack
from tests.helpers.stacks import QUICK_CONSUMER


def test_every_service_is_healthy_where_the_config_says(stack: Stack, stack_config: Config) -> None:
    statuses = {s.name: s for s in stack.status()}
    assert set(statuses) == {"zookeeper", "kafka-primary", "kafka-standby", "temporal", "temporal-ui"}
    assert all(s.health.ok for s in statuses.values()), statuses
    assert statuses["kafka-primary"].address == stack_config.clusters["primary"].bootstrap
    assert statuses["temporal"].address == stack_config.temporal.address
    assert statuses["temporal-ui"].link == stack_config.temporal_ui_url
    assert statuses["temporal-ui"].pid == statuses["temporal"].pid  # the UI is served by Temporal
    assert split_hostport(stack_config.temporal.address)[1] not in (7233, 17233)  # free, not fixed


def test_up_again_changes_nothing(stack: Stack) -> None:
    before = {s.name: s.pid for s in stack.status()}
    lines: list[str] = []
    stack.up(progress=lines.append)
    assert {s.name: s.pid for s in stack.status()} == before
    assert sum("already running" in line for line in lines) == 4


def test_zookeeper_stores_and_returns_data(stack: Stack, stack_config: Config) -> None:
    zk = KazooClient(hosts=stack_config.zookeeper.connect)
    zk.start(timeout=10)
    try:
        path = f"/test-{uuid.uuid4().hex}"
        zk.create(path, b"hello", makepath=True)
        assert zk.get(path)[0] == b"hello"
    finally:
        zk.stop()
        zk.close()


def test_temporal_accepts_a_client(stack: Stack, stack_config: Config) -> None:
    async def server_version() -> str:
        client = await Client.connect(stack_config.temporal.address)
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        return str(info.server_version)

    assert asyncio.run(server_version()).startswith("1.")


def test_each_cluster_takes_records_and_gives_them_back(stack: Stack, stack_config: Config) -> None:
    topic = f"rt-{uuid.uuid4().hex[:8]}"
    for cluster in stack_config.clusters.values():
        kafka.create_topics(cluster.bootstrap, [topic], partitions=3)
        sent = [kafka.Record(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(500)]
        assert kafka.produce(cluster.bootstrap, topic, sent) == 500
        got = kafka.consume(
            cluster.bootstrap, topic, group=f"{topic}-reader", count=500, settings=QUICK_CONSUMER
        )
        assert sorted((r.key, r.value) for r in got) == sorted((r.key, r.value) for r in sent)


def test_short_lived_commands_exit_cleanly_every_time(stack: Stack, stack_config: Config) -> None:
    """`stack up` once ended in SIGSEGV after printing its table, about one run in four: a native Temporal
    call still running while Python finalized. Commands that talk to Temporal must exit 0 every time."""
    assert stack_config.source is not None
    for _ in range(5):
        for command in (["stack", "up"], ["sagas", "list"]):
            done = subprocess.run(
                [sys.executable, "-m", "switchyard", "--config", str(stack_config.source), *command],
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert (done.returncode, done.stderr) == (0, ""), f"{command}: {done.returncode} {done.stderr}"


def test_a_log_end_is_read_while_the_partition_is_written_to(stack: Stack, stack_config: Config) -> None:
    """A Fetch that always brings records never says end-of-partition: the end is then the high watermark
    that Fetch answered with. (The mirror once waited 30 s for an end while an application wrote, and
    the switch back its reverse link was for was refused meanwhile.)"""
    bootstrap = stack_config.clusters["primary"].bootstrap
    topic = f"busy-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(bootstrap, [topic])
    writing = threading.Event()
    writing.set()

    def write() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
        while writing.is_set():
            producer.produce(topic, b"busy")
            producer.poll(0.002)
        producer.flush(10)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "busy-probe", "enable.partition.eof": True})
    try:
        time.sleep(0.5)
        before = kafka.ends_of(bootstrap, [(topic, 0)])[(topic, 0)]
        end = kafka.log_ends(probe, [(topic, 0)], timeout_s=10)[(topic, 0)]
        after = kafka.ends_of(bootstrap, [(topic, 0)])[(topic, 0)]
    finally:
        writing.clear()
        writer.join(15)
        probe.close()
    assert before <= end <= after
