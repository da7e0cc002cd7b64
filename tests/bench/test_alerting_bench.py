"""From a frozen primary to the standby by an alert alone, at the shipped rule timings, three runs.

Each run: brokers, a deployment and a routing root of its own (a failover shields the primary for good),
Prometheus evaluating infra/monitoring/rules.yml as shipped (``for: 30s``) every second, Alertmanager
sending at once (``group_wait: 0s``; the example configuration's 10 s would add to the alert stage), and
the receiver's policy failing the primary's keys over. Printed per run: the primary frozen (SIGSTOP) ->
the alert firing in Prometheus -> the saga started (recorded by the receiver's start) -> the first record
acknowledged on the standby. Nothing lost or written twice is asserted every run; timings only printed.
"""

from __future__ import annotations

import statistics

import pytest

from switchyard.config import Config
from switchyard.stack import Stack
from switchyard.table import render
from tests.helpers.alerting import freeze_the_primary, monitored
from tests.helpers.stacks import routing_root

RUNS = 3
STAGES = ("alert firing", "saga started", "first record acknowledged on the standby")


def test_a_frozen_primary_reaches_the_standby_by_its_alert(
    stack: Stack, stack_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> None:
    runs: list[dict[str, float]] = []
    for run in range(RUNS):
        directory = tmp_path_factory.mktemp(f"alerting-{run}")
        with (
            routing_root(stack_config, directory / "ledger.db") as routing,
            monitored(stack_config, routing, directory / "ledger.db", directory, wait=None) as watched,
        ):
            failed_over = freeze_the_primary(watched, within_s=180)
        assert failed_over.run.outcome == "switched", failed_over.run.result
        assert failed_over.on_standby == failed_over.sent
        runs.append(failed_over.stages)
    print(f"\nfrozen primary -> standby by an alert, rules as shipped, {RUNS} runs, s after the SIGSTOP")
    print(render(
        ("stage", "median s", "runs s"),
        [(s, f"{statistics.median(r[s] for r in runs):.1f}", " ".join(f"{r[s]:.1f}" for r in runs))
         for s in STAGES],
    ))  # fmt: skip
