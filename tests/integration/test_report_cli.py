"""`switchyard report` as an operator runs it — a process of its own, on a configuration whose ledger holds
saga and drill runs — and the HTML report as a person sees it, in a real (headless) Chromium: its plots
load, and its screenshot is the one in docs/operations.md#reports. Nothing but the ledger is needed: no
Kafka, ZooKeeper or Temporal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from switchyard.cli import cli
from tests.helpers.browser import chromium, is_png, keep, screenshot
from tests.helpers.reports import RUNS, T0, filled_ledger
from tests.helpers.stacks import write_stack_config

SCREENSHOT = "drill-report.png"
"""The documentation's picture (``SWITCHYARD_CAPTURE_SCREENSHOTS=docs/images`` writes it)."""


@dataclass
class Operator:
    config: Path
    env: dict[str, str]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "switchyard", "--config", str(self.config), "report", *args],
            env={**os.environ, **self.env}, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    def in_process(self, *args: str) -> tuple[int, str]:
        """For refusals: the same command without a process's start-up time."""
        done = CliRunner(env=self.env).invoke(cli, ["--config", str(self.config), "report", *args])
        return done.exit_code, done.output


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Operator:
    """A configuration (nothing of it runs) whose ledger holds every kind of run of tests/helpers/reports."""
    directory = tmp_path_factory.mktemp("report-cli")
    filled_ledger(directory / "ledger.db").close()
    return Operator(
        write_stack_config(directory), {"SWITCHYARD__LEDGER__URL": f"sqlite:///{directory / 'ledger.db'}"}
    )


def test_the_text_report_of_a_drill_by_its_saga_id(run: Operator) -> None:
    done = run(RUNS.drill_saga)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "drill nightly: FAIL"
    assert "  switchback RTO 41.20s over the objective 30s" in lines
    assert any(line.startswith("switchback  run-drill-failed-switchback  switched  41.20s") for line in lines)


def test_json_and_html_at_once(run: Operator, tmp_path: Path) -> None:
    page = tmp_path / "drill.html"
    done = run(RUNS.drill_passed, "--json", "--html", str(page))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["run_id"], doc["verdict"]) == (RUNS.drill_passed, {"status": "pass", "missed": []})
    assert done.stderr.strip() == f"wrote {page}"
    html = page.read_text()
    assert html.count('<img src="data:image/png;base64,') == 2
    assert "http" not in html.replace("http-equiv", "")  # nothing linked, nothing fetched


def test_the_drills_of_a_period(run: Operator) -> None:
    days = (datetime.now(UTC) - T0).days + 3  # the helper's drills are at a fixed date
    done = run("--since", f"{days}d")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["DRILL", "STARTED", "OUTCOME"]
    assert [line.split()[0] for line in lines[1:3]] == ["nightly", "nightly"]
    assert lines[1].split()[-1] == "FAIL"
    assert lines[2].split()[-1] == "PASS"
    assert lines[3].startswith("1 of 2 drills passed the objectives since ")


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--since", "30x"), 2, "Invalid value for '--since': '30x' is not a duration: a number with s, m"),
        (
            ("switchyard:nope",),
            8,
            "error: no saga run and no saga with the id 'switchyard:nope' in the ledger",
        ),
        ((), 2, "give a saga or run id, or --since PERIOD, not both"),
        ((RUNS.drill_saga, "--since", "1d"), 2, "give a saga or run id, or --since PERIOD, not both"),
    ],
)
def test_refusals_name_what_is_wrong(run: Operator, args: tuple[str, ...], code: int, message: str) -> None:
    exit_code, output = run.in_process(*args)
    assert exit_code == code
    assert message in output


def test_the_html_report_in_a_browser(run: Operator, tmp_path: Path) -> None:
    """The failed drill's page as Chromium shows it: both plots decoded and drawn; the screenshot is the
    documentation's (its ledger's dates are fixed, so it only changes when the page does)."""
    page = tmp_path / "drill.html"
    done = run(RUNS.drill_failed, "--html", str(page))
    assert done.returncode == 0, done.stderr
    with chromium(1280, 1400) as browser:
        browser.get(page.as_uri())
        assert browser.title == "drill nightly: fail"
        loaded = browser.execute_script(
            "return Array.from(document.images, i => [i.complete, i.naturalWidth, i.naturalHeight])"
        )
        assert len(loaded) == 2
        for complete, width, height in loaded:
            assert complete
            assert width > 0
            assert height > 0
        shown = browser.find_element("css selector", ".verdict").text
        shot = screenshot(browser, tmp_path / SCREENSHOT)
    assert shown == "FAIL"
    assert is_png(shot)
    with shot.open("rb") as file:
        header = file.read(24)
    assert int.from_bytes(header[16:20]) == 1280
    assert 1000 < int.from_bytes(header[20:24]) <= 1400  # the window less what the browser keeps of it
    assert 20_000 < shot.stat().st_size < 3_000_000
    keep(shot, SCREENSHOT)
