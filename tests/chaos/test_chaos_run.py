"""``make chaos``: the suite's sample of chaos trials (tests/integration/test_chaos.py), many times over —
``SWITCHYARD_CHAOS_TRIALS`` of them (100 by default), every process struck in turn, each trial printed as
it ends and all of them as a table at the end; everything the sample asserts is asserted here too. The
gateway here is one of two processes (``gateway.processes``): one of them is struck, or the whole
gateway."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers.chaos import run_trials, seeded
from tests.helpers.live import Live
from tests.helpers.victims import LoneGateway, StackService, SupervisedChild, Victim
from tests.integration.test_chaos import FROZEN_ONLY, victims

TRIALS = int(os.environ.get("SWITCHYARD_CHAOS_TRIALS", "100"))
RESULTS = Path(__file__).resolve().parents[2] / ".state" / "chaos"
"""Where each run leaves its trials (``chaos-<seed>.json``) and their picture (``chaos-<seed>.png``)."""
LIVE_OVERRIDES = {"SWITCHYARD__GATEWAY__PROCESSES": "2"}  # the module's deployment (tests/conftest.py)


@pytest.mark.timeout(0)  # a hundred trials take half an hour
def test_chaos_trials(
    live: Live, routing: RoutingStore, stack: Stack, stack_config: Config, tmp_path: Path
) -> None:
    seed = seeded()
    assert live.gateway is not None
    struck: list[Victim] = [
        v for v in victims(live, stack, seed[1]) if v.name != "gateway" and "broker" not in v.name
    ]
    struck += [
        LoneGateway(live.gateway, name="gateway, both processes"),
        SupervisedChild("gateway process", live.gateway),  # its supervisor starts it again
        *(StackService(f"{c} broker", stack, f"kafka-{c}", FROZEN_ONLY) for c in ("primary", "standby")),
    ]
    run_trials(
        live, routing, stack_config, struck, tmp_path, TRIALS, seed, at_approval=one_in_four,
        results=RESULTS,
    )  # fmt: skip


def one_in_four(_: Victim, rng: random.Random) -> bool:
    return rng.random() < 0.25
