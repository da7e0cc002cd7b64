"""The HTML report: one self-contained page (nothing fetched), its plots embedded PNGs drawn by
matplotlib, and every string from the ledger escaped."""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Iterator
from datetime import timedelta

import pytest

from switchyard.ledger import Ledger
from switchyard.reports import report_of
from switchyard.reports.history import drills_since
from switchyard.reports.html import html_period, html_report
from switchyard.reports.plots import step_chart
from switchyard.sagas.drills import Objectives
from tests.helpers.reports import HOSTILE, RUNS, T0, filled_ledger

PNG = b"\x89PNG\r\n\x1a\n"
EMBEDDED = re.compile(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    opened = filled_ledger(tmp_path_factory.mktemp("html") / "ledger.db")
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def drill_page(ledger: Ledger) -> str:
    return html_report(report_of(ledger, RUNS.drill_failed, Objectives()))


def images(page: str) -> list[tuple[int, int]]:
    """Each embedded image's size, checking it is a PNG."""
    sizes = []
    for encoded in EMBEDDED.findall(page):
        data = base64.b64decode(encoded, validate=True)
        assert data.startswith(PNG)
        width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
        sizes.append((width, height))
    return sizes


def assert_self_contained(page: str) -> None:
    lowered = page.lower()
    for outside in ('src="http', "src='http", 'href="http', "<script", "<link", "url(", "@import"):
        assert outside not in lowered, outside
    assert "default-src 'none'; img-src data:" in page  # the browser is told to fetch nothing, too


def test_a_drill_page_is_self_contained_with_both_plots(drill_page: str) -> None:
    assert drill_page.startswith("<!DOCTYPE html>")
    assert_self_contained(drill_page)
    sizes = images(drill_page)
    assert len(sizes) == 2  # the steps, and the canary around the switches
    for width, height in sizes:
        assert width >= 800
        assert height >= 300
    assert '<span class="verdict fail">FAIL</span>' in drill_page
    assert "switchback RTO 41.20s" in drill_page


def test_ledger_strings_are_escaped(ledger: Ledger) -> None:
    for run in (RUNS.switched, RUNS.compensated):  # the reason, and a step's detail
        page = html_report(report_of(ledger, run, Objectives()))
        assert HOSTILE not in page
        assert "<b>" not in page
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
        assert_self_contained(page)


def test_a_saga_page_has_its_step_chart_and_a_run_stopped_halfway_too(ledger: Ledger) -> None:
    for run in (RUNS.failover, RUNS.interrupted):
        page = html_report(report_of(ledger, run, Objectives()))
        assert len(images(page)) == 1
    assert '<span class="verdict incomplete">INCOMPLETE</span>' in page


def test_no_steps_no_chart(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.switched, Objectives())
    report.steps = []
    assert step_chart(report) is None


def test_the_period_page_plots_the_drills_rto(ledger: Ledger) -> None:
    page = html_period(drills_since(ledger, T0 - timedelta(days=3), Objectives()))
    assert_self_contained(page)
    assert len(images(page)) == 1
    assert "1 of 2 drills passed the objectives" in page
