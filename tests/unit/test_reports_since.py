"""``switchyard report --since``: the period's syntax (the one every Switchyard duration has), and the drills
of a period judged, newest first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import click
import pytest

from switchyard.cli.drills import DURATION
from switchyard.ledger import Ledger
from switchyard.reports import history
from switchyard.reports.history import HEADERS, drills_since, period_document, rows
from switchyard.sagas.drills import Objectives
from tests.helpers.reports import RUNS, T0, filled_ledger, write_run


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    opened = filled_ledger(tmp_path_factory.mktemp("since") / "ledger.db")
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("text", "period"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("1.5h", timedelta(minutes=90)),
        (" 7D ", timedelta(days=7)),
        ("1d12h", timedelta(hours=36)),
    ],
)
def test_since_takes_a_number_and_a_unit(text: str, period: timedelta) -> None:
    assert DURATION.convert(text, None, None) == period


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-3d", "3 weeks", "3e2s", "0d"])
def test_since_refuses_anything_else_saying_what_it_takes(text: str) -> None:
    with pytest.raises(
        click.BadParameter, match=r"a number with s, m, h or d \(90s, 15m, 6h, 30d, 1h30m\)|longer"
    ):
        DURATION.convert(text, None, None)


def test_the_drills_of_a_period_newest_first(ledger: Ledger) -> None:
    period = drills_since(ledger, T0 - timedelta(days=3), Objectives())
    assert [r.run.run_id for r in period.reports] == [RUNS.drill_failed, RUNS.drill_passed]  # no other kind
    assert period.summary() == (
        "1 of 2 drills passed the objectives since 2026-05-01T02:00:00+00:00 (1 failed)"
    )
    table = rows(period)
    assert len(HEADERS) == len(table[0])
    assert table[0] == (
        "nightly", "2026-05-03T02:00:00+00:00", "failed", "switchover 4.20s / switchback 41.20s", "12.50s",
        "2", "3", "FAIL",
    )  # fmt: skip
    assert table[1][-1] == "PASS"
    doc = period_document(period)
    assert (doc["passed"], doc["total"]) == (1, 2)
    assert doc["drills"][0]["rto_s"] == {"switchover": 4.2, "switchback": 41.2}
    assert doc["drills"][1]["verdict"] == {"status": "pass", "missed": []}


def test_a_period_with_no_drill_says_so(ledger: Ledger) -> None:
    period = drills_since(ledger, T0 + timedelta(days=1), Objectives())
    assert period.reports == []
    assert period.summary() == "no drill since 2026-05-05T02:00:00+00:00"


def test_progress_only_for_many_drills(ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    heard: list[str] = []
    drills_since(ledger, T0 - timedelta(days=30), Objectives(), heard.append)
    assert heard == []  # two drills: quiet
    monkeypatch.setattr(history, "PROGRESS_EVERY", 1)
    drills_since(ledger, T0 - timedelta(days=30), Objectives(), heard.append)
    assert heard == ["judged 1 of 2 drills", "judged 2 of 2 drills"]


def test_an_unreadable_drill_keeps_its_line(tmp_path_factory: pytest.TempPathFactory) -> None:
    ledger = Ledger.open(f"sqlite:///{tmp_path_factory.mktemp('odd') / 'ledger.db'}")
    try:
        odd = {"outcome": "x"}
        write_run(ledger, "odd", "switchyard:drill:x", "drill", ["x"], at=T0, steps=[], result=odd, took_s=1)
        (report,) = drills_since(ledger, T0 - timedelta(days=1), Objectives()).reports
    finally:
        ledger.close()
    assert (report.run.outcome, report.verdict.status) == ("x", "fail")
    assert "run odd" in report.verdict.missed[0]
