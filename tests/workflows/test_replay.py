"""Every committed history replays against today's workflow code: a change that would make a running saga
take a different path (non-deterministic) fails here, before it reaches a worker with sagas in flight.

The histories come from real runs (``SWITCHYARD_CAPTURE_HISTORIES=<dir>``, see conftest.py); a change
that is meant to alter the path goes through ``workflow.patched()`` and keeps the old ones replaying.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from switchyard.temporal import data_converter
from workers.worker.registry import WORKFLOWS

HISTORIES = sorted(Path(__file__).with_name("histories").glob("*.json"))


def test_there_are_histories_of_every_saga() -> None:
    kinds = {path.stem.rsplit("-", 1)[0] for path in HISTORIES}
    assert {
        "switchover",
        "switchback",
        "failover",
        "topic-migration",
        "partition-migration",
        "drill",
        "migration-aging",
        "origin-retirement",
        "evacuation",
    } <= kinds, kinds


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
def test_a_history_replays(path: Path) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter())
    result = asyncio.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"
