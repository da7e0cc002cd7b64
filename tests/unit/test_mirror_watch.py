"""The copy session's watch (``workers/mirror/watch.py``): when it asks the group about its member, and
what it logs of a copy loop stuck in a call."""

from __future__ import annotations

import logging
import threading

import pytest

from workers.mirror import watch as watch_module
from workers.mirror.watch import REJOIN_WITHIN_S, SessionWatch


def test_a_member_waiting_for_partitions_asks_its_group_once_per_interval() -> None:
    watch = SessionWatch("l", threading.current_thread())
    assert not watch.ask_group(holds=False, waits=True, now=100.0)  # the wait begins
    assert not watch.ask_group(holds=False, waits=True, now=100.0 + REJOIN_WITHIN_S - 1)
    assert watch.ask_group(holds=False, waits=True, now=100.0 + REJOIN_WITHIN_S)
    assert not watch.ask_group(holds=False, waits=True, now=101.0 + REJOIN_WITHIN_S)  # asked just now
    assert watch.ask_group(holds=False, waits=True, now=100.0 + 2 * REJOIN_WITHIN_S)


@pytest.mark.parametrize(("holds", "waits"), [(True, True), (False, False)])
def test_holding_partitions_or_not_waiting_for_any_starts_the_wait_over(holds: bool, waits: bool) -> None:
    watch = SessionWatch("l", threading.current_thread())
    watch.ask_group(holds=False, waits=True, now=0.0)
    watch.ask_group(holds=holds, waits=waits, now=REJOIN_WITHIN_S - 1)  # partitions came, or a pause
    assert not watch.ask_group(holds=False, waits=True, now=REJOIN_WITHIN_S + 1)  # a new wait begins
    assert not watch.ask_group(holds=False, waits=True, now=2 * REJOIN_WITHIN_S)
    assert watch.ask_group(holds=False, waits=True, now=2 * REJOIN_WITHIN_S + 1)


def stuck_in_a_call(release: threading.Event) -> None:
    release.wait()


def test_a_copy_loop_stuck_in_a_call_is_logged_with_where_it_is_once_per_stall(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(watch_module, "STALL_S", 0.3)
    release, over = threading.Event(), threading.Event()
    loop = threading.Thread(target=stuck_in_a_call, args=(release,))
    loop.start()
    watch = SessionWatch("link-a", loop)
    watcher = threading.Thread(target=watch.watch, args=(over,))
    with caplog.at_level(logging.WARNING, logger=watch_module.__name__):
        watcher.start()
        over.wait(1.0)  # three stall intervals, one stall
        release.set()
        watch.turned()
        over.wait(0.2)  # turning again: nothing more
        over.set()
        watcher.join()
        loop.join()
    stalls = [r.getMessage() for r in caplog.records]
    assert len(stalls) == 1, stalls
    assert stalls[0].startswith("link link-a: the copy loop has not turned for 0 s")
    assert "in stuck_in_a_call" in stalls[0]
    assert "release.wait()" in stalls[0]
