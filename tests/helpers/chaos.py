"""Chaos trials: what each saw, and what makes a run count (tests/integration/test_chaos.py, make bench)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Trial:
    """One saga with a process killed at a random moment of it."""

    kind: str
    killed_after_s: float
    outcome: str
    saga_held_s: float
    js_held_s: float
    confluent_held_s: float


def proves_something(trials: list[Trial]) -> None:
    """A run in which no saga switched fails: each trial may compensate (a saga that cannot go on puts
    everything back), so a run of compensations alone would pass while showing nothing of a switch
    under chaos — and a defect that made every switch compensate would pass with it."""
    switched = [t for t in trials if t.outcome == "switched"]
    assert switched, f"none of {len(trials)} sagas switched (all compensated): the run proves nothing"
