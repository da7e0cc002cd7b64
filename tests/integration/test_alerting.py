"""End to end with the real parts: Debian's Prometheus scrapes the gateway and the mirror and evaluates the
shipped rules (infra/monitoring/rules.yml), Debian's Alertmanager posts what fires to `switchyard webhook`
with its bearer token, and the receiver's policy fails the primary's keys over — a frozen primary (SIGSTOP
of its broker) is failed over by the alert alone, and the application goes on on the standby.

The shipped rules wait 30 s before an unreachable cluster fires (``for: 30s``); here they wait 2 s: what
is tested is the path from the broker to the standby, not the patience. ``make bench`` times each stage
at the shipped timings (tests/bench/test_alerting_bench.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers.alerting import ALERT, Monitored, freeze_the_primary, monitored


@pytest.fixture(scope="module")
def watched(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Monitored]:
    with monitored(stack_config, routing, ledger_path, tmp_path_factory.mktemp("alerting"), wait="2s") as w:
        yield w


def test_a_frozen_primary_is_failed_over_by_its_alert_alone(watched: Monitored) -> None:
    failed_over = freeze_the_primary(watched)
    stages = failed_over.stages
    print(f"\nfrozen primary -> {', '.join(f'{k} {v:.1f}s' for k, v in stages.items())}")
    assert "saga started" in stages, "a record was acknowledged, but no saga moved the application"
    run = failed_over.run
    assert run.actor == "alertmanager:switchyard", run.actor
    assert ALERT in run.reason, run.reason
    assert run.outcome == "switched", run.result
    (app,) = run.keys
    assert watched.routing.binding(BindingKey.for_app(app)).cluster == "standby"  # type: ignore[union-attr]
    assert failed_over.on_standby == failed_over.sent  # nothing lost, nothing twice
