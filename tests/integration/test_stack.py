"""The session stack: every service healthy on the free ports chosen for this run, and really usable."""

from __future__ import annotations

import asyncio
import uuid

from click.testing import CliRunner
from kazoo.client import KazooClient
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client

from switchyard import demo
from switchyard.cli import cli
from switchyard.config import Config, split_hostport
from switchyard.stack import Stack


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


def test_round_trip_on_each_cluster(stack: Stack, stack_config: Config) -> None:
    topic = f"rt-{uuid.uuid4().hex[:8]}"
    for cluster_id, cluster in stack_config.clusters.items():
        result = demo.round_trip(cluster.bootstrap, cluster_id, topic, 500)
        assert (result.produced, result.consumed) == (500, 500)


def test_demo_command_ends_with_the_table(stack: Stack, stack_config: Config) -> None:
    assert stack_config.source is not None
    result = CliRunner().invoke(
        cli, ["--config", str(stack_config.source), "demo", "--records", "200"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("produced 200, consumed 200, every record matched") == 2
    assert "SERVICE" in result.output
    assert stack_config.temporal_ui_url in result.output
