"""The stopwatch a slow drain reports with: each part's seconds, the longest first."""

from __future__ import annotations

import time

import pytest

from switchyard.stopwatch import Stopwatch


def test_parts_add_up_and_the_longest_is_named_first() -> None:
    watch = Stopwatch()
    with watch.part("reading the ends"):
        time.sleep(0.02)
    for _ in range(2):
        with watch.part("reading the map"):
            time.sleep(0.03)
    assert watch.parts["reading the map"] >= 0.06
    assert 0.02 <= watch.parts["reading the ends"] < watch.parts["reading the map"]
    assert watch.total() >= sum(watch.parts.values())
    said = str(watch)
    assert said.index("reading the map") < said.index("reading the ends"), said


def test_a_part_that_raises_is_counted() -> None:
    watch = Stopwatch()
    with pytest.raises(TimeoutError), watch.part("asking"):
        raise TimeoutError
    assert "asking" in watch.parts
