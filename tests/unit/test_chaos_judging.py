"""A chaos run is judged by what it proves, not only by what it did not break."""

from __future__ import annotations

import pytest

from tests.helpers.chaos import Trial, proves_something
from tests.helpers.compat import Seen, lapses


def test_a_run_in_which_no_saga_switched_fails() -> None:
    with pytest.raises(AssertionError, match="none of 4 sagas switched"):
        proves_something([Trial("switchover", "compensated")] * 4)


def test_a_run_with_a_switch_among_compensations_counts() -> None:
    proves_something([Trial("switchover", "compensated"), Trial("switchover", "switched")])


@pytest.mark.parametrize(("kind", "outcome"), [("migrate-topic", "migrated"), ("drill", "passed")])
def test_a_run_in_which_another_kind_moved_what_it_moves_counts(kind: str, outcome: str) -> None:
    proves_something([Trial("switchover", "compensated"), Trial(kind, outcome)])


def test_what_an_application_saw_during_a_trial_is_that_trials() -> None:
    """The applications that run through every trial: a failed send, and a commit refused other than for
    a connection lost while a process was gone, count against the trial they came in."""
    manual: dict[str, object] = {"k": "batch", "g": "manual", "recs": []}
    seen = Seen()
    seen.add([
        {"k": "failed", "t": 105.0, "v": 7, "e": "KafkaJSNumberOfRetriesExceeded: Closed connection"},
        {"k": "failed", "t": 250.0, "v": 9, "e": "later"},
        {**manual, "t": 110.0, "commit": "KafkaJSConnectionError", "why": "gone"},
        {**manual, "t": 120.0, "commit": "UNKNOWN_MEMBER_ID", "why": "unknown"},
        {"k": "batch", "t": 121.0, "g": "auto", "recs": [], "commit": "ILLEGAL_GENERATION"},
    ])  # fmt: skip
    assert lapses(seen, (100.0, 200.0), [(108.0, 109.0)], []) == [
        "1 sends failed, first 7: KafkaJSNumberOfRetriesExceeded: Closed connection",
        "commits refused: {'UNKNOWN_MEMBER_ID': 1}, first: unknown",
    ]
    assert lapses(seen, (0.0, 100.0), [(108.0, 109.0)], []) == []
    assert lapses(seen, (100.0, 200.0), [], [])[1] == (
        "commits refused: {'KafkaJSConnectionError': 1, 'UNKNOWN_MEMBER_ID': 1}, first: gone"
    )


def test_a_commit_timed_out_is_excused_only_while_a_process_holding_connections_was_gone() -> None:
    """A broker killed stalls its group coordinator's log until its cluster fences it, and a commit
    times out as it would for a client connected directly; the same time-out while only a process
    that holds no client's connection (the worker, say) was gone, or long after, is the trial's."""
    seen = Seen()
    seen.add([{"k": "batch", "g": "manual", "recs": [], "t": 115.0, "commit": "_TIMED_OUT", "why": "late"}])
    assert lapses(seen, (100.0, 200.0), [(108.0, 109.0)], [(108.0, 109.0)]) == []
    refused = ["commits refused: {'_TIMED_OUT': 1}, first: late"]
    assert lapses(seen, (100.0, 200.0), [(108.0, 109.0)], []) == refused
    assert lapses(seen, (100.0, 200.0), [(80.0, 90.0)], [(80.0, 90.0)]) == refused
