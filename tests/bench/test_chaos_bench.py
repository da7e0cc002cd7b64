"""More trials of the chaos test (tests/integration/test_chaos.py): the saga worker SIGKILLed at a random
moment of each of ``SWITCHYARD_BENCH_TRIALS`` switches (12 by default) under kafkajs and confluent-kafka
traffic. Each trial's outcome and how long each application was held are printed as a table; everything
the suite asserts is asserted here too."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.chaos import Trial
from tests.helpers.live import Live
from tests.integration.test_chaos import run_trials

TRIALS = int(os.environ.get("SWITCHYARD_BENCH_TRIALS", "12"))
JS_RATE = float(os.environ.get("SWITCHYARD_BENCH_JS_RATE", "50"))
"""Ten times the suite's: a hold longer than 64 sends fills a connection's answers (see test_chaos)."""


def test_chaos_trials(live: Live, routing: RoutingStore, stack_config: Config, tmp_path: Path) -> None:
    trials = run_trials(live, routing, stack_config, tmp_path, TRIALS, JS_RATE)
    headers = [f.name for f in dataclasses.fields(Trial)]
    rows = [[f"{v:.2f}" if isinstance(v, float) else v for v in dataclasses.astuple(t)] for t in trials]
    print("\n" + render(headers, rows))
    held = sorted(max(t.js_held_s, t.confluent_held_s) for t in trials)
    print(
        f"clients held: median {held[len(held) // 2]:.2f} s, max {held[-1]:.2f} s over {len(trials)} trials"
    )
