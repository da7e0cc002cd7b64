"""``make chaos``: the suite's sample of chaos trials (tests/integration/test_chaos.py), many times over —
``SWITCHYARD_CHAOS_TRIALS`` of them (100 by default), every process struck in turn and every saga kind
run in turn (failovers, topic and partition migrations and drills beside the switches), each trial
printed as it ends and all of them as a table at the end; everything the sample asserts is asserted here
too. The gateway here is one of two processes (``gateway.processes``): one of them is struck, or the
whole gateway. The clusters have three brokers each, and ZooKeeper is an ensemble of three nodes
(tests/chaos/conftest.py): one of them is killed or frozen (the suite's sample strikes the one node of
its ZooKeeper and the one broker of its clusters)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers.chaos import KINDS, run_trials, seeded
from tests.helpers.live import Live
from tests.helpers.victims import LoneGateway, OneOfSeveral, StackService, SupervisedChild, Victim

TRIALS = int(os.environ.get("SWITCHYARD_CHAOS_TRIALS", "100"))
CHOSEN = tuple(k for k in os.environ.get("SWITCHYARD_CHAOS_KINDS", "").split(",") if k)
"""Only these saga kinds (``switch``, ``failover``, ``migrate-topic``, ``drill``), where named."""
RESULTS = Path(__file__).resolve().parents[2] / ".state" / "chaos"
"""Where each run leaves its trials (``chaos-<seed>.json``) and their picture (``chaos-<seed>.png``)."""
LIVE_OVERRIDES = {"SWITCHYARD__GATEWAY__PROCESSES": "2"}  # the module's deployment (tests/conftest.py)


@pytest.mark.timeout(0)  # a hundred trials take half an hour
def test_chaos_trials(
    live: Live, routing: RoutingStore, stack: Stack, stack_config: Config, tmp_path: Path
) -> None:
    unknown = set(CHOSEN) - set(KINDS)
    assert not unknown, f"SWITCHYARD_CHAOS_KINDS: no kind {sorted(unknown)}; the kinds: {sorted(set(KINDS))}"
    seed = seeded()
    assert live.gateway is not None
    assert live.mirror is not None
    struck: list[Victim] = [
        LoneGateway(live.gateway, name="gateway, both processes"),
        SupervisedChild("gateway process", live.gateway),  # its supervisor starts it again
        SupervisedChild("mirror", live.mirror),
        SupervisedChild("worker", live.workers[-1]),
        StackService("temporal", stack, "temporal"),
        # of three each (conftest.py)
        OneOfSeveral("zookeeper node", stack, "zookeeper-"),
        *(OneOfSeveral(f"{c} broker", stack, f"kafka-{c}") for c in ("primary", "standby")),
    ]
    run_trials(
        live, routing, stack_config, struck, tmp_path, TRIALS, seed, at_approval=one_in_four,
        results=RESULTS, kinds=CHOSEN or KINDS,
    )  # fmt: skip


def one_in_four(_: Victim, rng: random.Random) -> bool:
    return rng.random() < 0.25
