"""Turns at writing a link's group offsets, on the session's ZooKeeper: a saga's retried group sync ends
the turn its own earlier attempt died holding (that attempt's session would hold it until it expires,
clients held meanwhile), and never a turn someone else holds; a sync cancelled while it waits leaves no
turn behind."""

from __future__ import annotations

import threading
import time

import pytest
from kazoo.client import KazooClient
from temporalio.bridge.runtime import Runtime
from temporalio.exceptions import CancelledError

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


def test_a_sync_cancelled_while_it_waits_for_its_turn_leaves_no_turn_behind(
    zk: KazooClient, zk_root: str, stack_config: Config
) -> None:
    """Temporal cancels a running step's thread by raising CancelledError in it (a saga's worker frozen
    mid-switch: the saga moved on, and its local step was cancelled when the worker came back). Kazoo
    withdraws a waiter's place in the queue only on its own errors: the cancelled sync's place stayed,
    became the turn when the writer before it ended, and kept it for as long as its worker lived. A
    chaos sample's next switchbacks waited 15 s each for it, and compensated with clients held 57 to 63 s."""
    layout = Layout(zk_root)
    mirror = GroupWriters(zk, layout, "p2s", "mirror:m-1")
    saga = GroupWriters(zk, layout, "p2s", "saga switchyard:orders")
    waiting, cancelled = threading.Event(), []

    def sync() -> None:
        waiting.set()
        try:
            with saga.turn(30):
                pass
        except CancelledError as exc:
            cancelled.append(exc)

    with mirror.turn(5):
        waiter = threading.Thread(target=sync)
        waiter.start()
        waiting.wait(5)
        until_queued(zk, layout, 2)
        assert waiter.ident is not None
        Runtime._raise_in_thread(waiter.ident, CancelledError)  # as temporalio cancels a sync activity
    waiter.join(10)  # woken as the mirror's turn ends, its queued place the turn now
    assert cancelled, "the cancellation never reached the waiting sync"
    with GroupWriters(zk, layout, "p2s", "saga switchyard:billing").turn(2):
        pass  # the next saga's sync: not kept waiting by a turn nobody takes


def until_queued(zk: KazooClient, layout: Layout, writers: int) -> None:
    deadline = time.monotonic() + 5
    while len(zk.get_children(layout.group_writer("p2s"))) < writers:
        assert time.monotonic() < deadline, "the sync never queued for its turn"
        time.sleep(0.05)
