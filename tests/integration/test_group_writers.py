"""Turns at writing a link's group offsets, on the session's ZooKeeper: a saga's retried group sync ends
the turn its own earlier attempt died holding (that attempt's session would hold it until it expires,
clients held meanwhile), and never a turn someone else holds."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from switchyard.config import Config
from switchyard.errors import RoutingUnavailable
from switchyard.mirror.writers import GroupWriters
from switchyard.routing.layout import Layout
from switchyard.routing.zk import connect, disconnect


def held_elsewhere(config: Config, layout: Layout, writer: str) -> KazooClient:
    """A turn taken in another ZooKeeper session and never given back: a worker killed mid-sync."""
    other = connect(config)
    assert other.Lock(layout.group_writer("p2s"), writer).acquire(timeout=5)
    return other


def test_a_retried_saga_ends_the_turn_its_dead_attempt_held_and_no_other(
    zk: KazooClient, zk_root: str, stack_config: Config
) -> None:
    layout = Layout(zk_root)
    saga = GroupWriters(zk, layout, "p2s", "saga switchyard:orders")

    dead = held_elsewhere(stack_config, layout, saga.writer)
    try:
        with pytest.raises(RoutingUnavailable, match="kept its turn for 1s"), saga.turn(1):
            pass  # a first attempt waits: the turn may be a live writer's
        with saga.turn(timeout_s=5, after_own_attempt=True):
            pass  # while the dead attempt's session still lives: its turn was ended, not waited out
    finally:
        disconnect(dead)

    mirror = held_elsewhere(stack_config, layout, "mirror:m-1")
    try:
        refused = pytest.raises(RoutingUnavailable, match="kept its turn for 1s")
        with refused, saga.turn(1, after_own_attempt=True):
            pass  # the mirror's turn is never ended by a saga
    finally:
        disconnect(mirror)
