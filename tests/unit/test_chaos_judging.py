"""A chaos run is judged by what it proves, not only by what it did not break."""

from __future__ import annotations

import pytest

from tests.helpers.chaos import Trial, proves_something


def test_a_run_in_which_no_saga_switched_fails() -> None:
    with pytest.raises(AssertionError, match="none of 4 sagas switched"):
        proves_something([Trial("switchover", "compensated")] * 4)


def test_a_run_with_a_switch_among_compensations_counts() -> None:
    proves_something([Trial("switchover", "compensated"), Trial("switchover", "switched")])


@pytest.mark.parametrize(("kind", "outcome"), [("migrate-topic", "migrated"), ("drill", "passed")])
def test_a_run_in_which_another_kind_moved_what_it_moves_counts(kind: str, outcome: str) -> None:
    proves_something([Trial("switchover", "compensated"), Trial(kind, outcome)])
