"""`switchyard clusters ...` and `switchyard bindings ...` as an operator uses them."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from switchyard.cli import cli
from switchyard.config import Config
from switchyard.ledger import Ledger
from switchyard.model import MigrationMode, MigrationState, PartitionId
from switchyard.routing import MigrationChange, RoutingStore
from switchyard.routing.zk import connect, disconnect
from switchyard.stack import Stack

ME = f"user:{getpass.getuser()}"


@dataclass
class Operator:
    """Runs the CLI against the session stack, with a ZooKeeper root and a ledger of the test's own."""

    config: Config
    root: str
    env: dict[str, str]

    def __call__(self, *args: str) -> Result:
        return CliRunner(env=self.env).invoke(cli, ["--config", str(self.config.source), *args])

    def table(self, *args: str) -> list[list[str]]:
        return [line.split() for line in self(*args).output.splitlines()]


@pytest.fixture
def run(stack: Stack, stack_config: Config, tmp_path: Path) -> Iterator[Operator]:
    root = f"/cli-{uuid.uuid4().hex[:10]}"
    env = {"SWITCHYARD__ZOOKEEPER__ROOT": root, "SWITCHYARD__LEDGER__URL": f"sqlite:///{tmp_path / 'l.db'}"}
    yield Operator(stack_config, root, env)
    zk = connect(stack_config)
    zk.delete(root, recursive=True)
    disconnect(zk)


def test_clusters(run: Operator) -> None:
    assert run("clusters", "add", "primary").exit_code == 0
    added = run("clusters", "add", "dr", "--bootstrap", "dr-kafka:9092", "--by", "user:alice")
    assert added.output == "cluster dr registered (dr-kafka:9092), epoch 2\n"
    again = run("clusters", "add", "primary")
    assert again.exit_code == 5
    assert "cluster 'primary' is already registered" in again.output
    unknown = run("clusters", "add", "nowhere")
    assert unknown.exit_code == 2
    assert "give --bootstrap" in unknown.output

    assert run("clusters", "shield", "dr", "--reason", "maintenance").exit_code == 0
    assert run("clusters", "shield", "dr").exit_code == 5
    table = run.table("clusters", "list")
    assert table[0] == ["CLUSTER", "BOOTSTRAP", "STATE", "EPOCH", "UPDATED", "BY"]
    primary = run.config.clusters["primary"].bootstrap
    assert [row[:4] + row[5:] for row in table[1:]] == [
        ["dr", "dr-kafka:9092", "shielded", "3", ME],
        ["primary", primary, "active", "1", ME],
    ]
    assert run("clusters", "unshield", "dr").output == "cluster dr is active, epoch 4\n"


def test_bindings_lifecycle(run: Operator) -> None:
    run("clusters", "add", "primary")
    run("clusters", "add", "standby")
    assert (
        run("bindings", "set", "orders", "primary").output == "orders: unbound -> primary (active), epoch 3\n"
    )
    assert run("bindings", "set", "orders##billing", "standby", "--reason", "split").exit_code == 0
    blocked = run("bindings", "set", "orders", "primary", "--state", "blocked", "--expect-epoch", "3")
    assert blocked.output == "orders: primary (active) -> primary (blocked), epoch 5\n"
    stale = run("bindings", "set", "orders", "standby", "--expect-epoch", "3")
    assert stale.exit_code == 4
    assert "orders: expected epoch 3, but it is at epoch 5" in stale.output

    assert run("bindings", "get", "orders").output.startswith(
        f"orders: primary (blocked), epoch 5, by {ME} at "
    )
    missing = run("bindings", "get", "orders@host-1")
    assert (missing.exit_code, missing.output) == (1, "orders@host-1: not bound\n")
    bad = run("bindings", "get", "orders@")
    assert bad.exit_code == 2
    assert "the instance name is empty" in bad.output

    listed = run.table("bindings", "list")
    assert [row[:4] for row in listed[1:-1]] == [
        ["orders", "primary", "blocked", "5"],
        ["orders##billing", "standby", "active", "4"],
    ]
    assert listed[-1] == ["(epoch", "5)"]
    history = run.table("bindings", "history", "orders")
    assert [row[:4] for row in history[1:]] == [
        ["5", "orders", "primary/active", "primary/blocked"],
        ["3", "orders", "-/-", "primary/active"],
    ]


def test_resolve_explains_itself(run: Operator) -> None:
    run("clusters", "add", "primary")
    run("clusters", "add", "standby")
    run("bindings", "set", "orders", "primary")
    run("bindings", "set", "orders#payments", "standby")
    out = run("bindings", "resolve", "--client-id", "orders@host-7", "--topic", "payments").output
    assert "cluster:  standby (active)\n" in out
    assert "keys:     orders#payments\n" in out
    assert "why:      every topic has the same binding: orders#payments\n" in out
    out = run("bindings", "resolve", "--user", "orders", "--client-id", "x", "--group", "g").output
    assert "cluster:  primary (active)\n" in out
    assert "why:      AppID binding orders; group 'g' has no binding\n" in out


def test_rebuild_and_recover(run: Operator) -> None:
    run("clusters", "add", "primary")
    run("bindings", "set", "orders", "primary")
    assert run("bindings", "rebuild").output == "ZooKeeper already matches the ledger (epoch 2)\n"
    before = run("bindings", "list").output
    zk = connect(run.config)
    zk.delete(run.root, recursive=True)  # ZooKeeper loses the tree
    disconnect(zk)
    assert run("bindings", "list").output == "KEY  CLUSTER  STATE  EPOCH  UPDATED  BY\n(epoch 0)\n"
    assert (
        run("bindings", "rebuild", "--dry-run").output
        == "would write 1 bindings, 1 clusters, 0 links and 0 migrations at epoch 2\n"
    )
    assert run("bindings", "rebuild").output == (
        "wrote 1 bindings, 1 clusters, 0 links and 0 migrations at epoch 2\n"
    )
    assert run("bindings", "list").output == before
    assert run("bindings", "recover").output == "nothing pending\n"


def test_links_refuse_what_would_break_routing_and_can_be_deleted(run: Operator) -> None:
    run("clusters", "add", "primary")
    run("clusters", "add", "standby")
    bad = run("links", "create", "mirror", "--source", "primary", "--target", "standby", "--include", "mir[(")
    assert bad.exit_code == 5
    assert "pattern 'mir[(' is not a regular expression" in bad.output
    empty = run("links", "create", "", "--source", "primary", "--target", "standby")
    assert empty.exit_code == 5
    assert "a link id is empty" in empty.output
    assert run.table("links", "list")[1:] == []

    assert run("links", "create", "p2s", "--source", "primary", "--target", "standby").exit_code == 0
    running = run("links", "delete", "p2s")
    assert running.exit_code == 5
    assert "link p2s is running: pause it first" in running.output
    deleted = run("links", "delete", "p2s", "--force", "--reason", "retired")
    assert deleted.exit_code == 0, deleted.output
    assert deleted.output.startswith("link p2s deleted, epoch 4")
    assert run.table("links", "list")[1:] == []
    assert run("links", "delete", "p2s", "--force").exit_code == 5


def test_a_migration_left_migrating_is_called_off_and_one_in_effect_is_not(run: Operator) -> None:
    run("clusters", "add", "primary")
    run("clusters", "add", "standby")
    zk, ledger = connect(run.config), Ledger.open(run.env["SWITCHYARD__LEDGER__URL"])
    try:
        RoutingStore(zk, run.root, ledger).apply(
            [MigrationChange(PartitionId("orders", 1), 0, "primary", "standby", MigrationMode.SMOOTH,
                             MigrationState.MIGRATING),
             MigrationChange(PartitionId("orders", 2), 0, "primary", "standby", MigrationMode.FAULT,
                             MigrationState.MIGRATED, end_offset=5000)],
            actor="saga:gone", reason="a saga that died holding it",
        )  # fmt: skip
    finally:
        disconnect(zk)
        ledger.close()
    called = run("migrations", "call-off", "orders", "1", "--reason", "its saga is gone")
    assert called.exit_code == 0, called.output
    assert called.output.startswith("migration of orders[1] called off, epoch ")
    refused = run("migrations", "call-off", "orders", "2")
    assert refused.exit_code != 0
    assert "in effect since epoch 3, it cannot be called off" in refused.output
    assert run("migrations", "call-off", "orders", "3").output.endswith("orders[3] has no migration\n")
    shown = run("migrations", "show", "orders", "1").output
    assert "orders[1]: no migration now (called off)" in shown
    assert "migrating -> called-off by user:" in shown
