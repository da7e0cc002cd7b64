"""A report as one self-contained HTML page: inline CSS, the plots embedded as base64 PNG, nothing fetched
(its Content-Security-Policy forbids it), so the file can be mailed, archived or opened offline. Every
string from the ledger is escaped: an actor, a reason or a step's error message is data, never markup."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape

from switchyard import __version__
from switchyard.reports import plots
from switchyard.reports.history import HEADERS, Period, rows
from switchyard.reports.model import Report
from switchyard.reports.tables import Section, facts, sections, why

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #212121; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
.verdict { display: inline-block; padding: .1em .6em; border-radius: .3em; color: #fff; font-weight: 600; }
.pass { background: #2e7d32; } .fail { background: #c62828; } .incomplete { background: #78909c; }
ul.why { margin: .4em 0 1em; } table { border-collapse: collapse; margin: .4em 0; }
th, td { border-bottom: 1px solid #e0e0e0; padding: .25em .7em; text-align: left; vertical-align: top; }
th { background: #f5f5f5; font-weight: 600; } td { font-variant-numeric: tabular-nums; }
table.facts th { background: none; } img { max-width: 100%; display: block; margin: .5em 0; }
footer { margin-top: 3em; color: #757575; font-size: .85em; }
"""
POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def html_report(report: Report) -> str:
    """The verdict and the facts, what clients saw, the figures' tables, then the steps, drawn and listed."""
    status = report.verdict.status
    *figures, steps = sections(report)  # the steps' table always comes last
    body = [
        f"<h1>{escape(f'{report.run.kind} {report.name}')} "
        f'<span class="verdict {escape(status)}">{escape(status.upper())}</span></h1>',
        _list(why(report)),
        _table((), facts(report), facts=True),
    ]
    if report.canary is not None:
        chart = plots.canary_chart(report.canary.timeline)
        body.append(_image(chart, "canary acknowledgements and consumer progress, the switches shaded"))
    body += [_section(section) for section in figures]
    body += [
        "<h2>step timeline</h2>",
        _image(plots.step_chart(report), "each step attempt over time, colored by outcome"),
        _section(steps),
    ]
    return _page(f"{report.run.kind} {report.name}: {status}", body)


def html_period(period: Period) -> str:
    body = [
        f"<h1>Drills since {escape(period.since.isoformat(timespec='seconds'))}</h1>",
        f"<p>{escape(period.summary())}</p>",
        _image(plots.trend_chart(period.reports), "each drill's switches' RTO over time"),
        _table(HEADERS, rows(period)),
    ]
    return _page("drills", body)


def _page(title: str, body: Sequence[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        *body,
        f"<footer>switchyard {escape(__version__)} report</footer></body></html>",
    ])  # fmt: skip


def _image(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}" alt="{escape(alt)}">'


def _list(items: Sequence[str]) -> str:
    return '<ul class="why">' + "".join(f"<li>{escape(item)}</li>" for item in items) + "</ul>"


def _table(headers: Sequence[str], cells: Sequence[Sequence[str]], *, facts: bool = False) -> str:
    """A table; a facts table has no header row, and each row's first cell names the row."""
    head = "" if facts else _row(headers, "th")
    body = "".join(_row(row, "td", facts) for row in cells)
    return f'<table class="{"facts" if facts else ""}">{head}{body}</table>'


def _row(cells: Sequence[str], tag: str, named: bool = False) -> str:
    tags = [("th" if named and i == 0 else tag) for i in range(len(cells))]
    return (
        "<tr>" + "".join(f"<{t}>{escape(cell)}</{t}>" for t, cell in zip(tags, cells, strict=True)) + "</tr>"
    )


def _section(section: Section) -> str:
    notes = "".join(f"<p>{escape(note)}</p>" for note in section.notes)
    table = _table(section.headers, section.rows) if section.rows else ""
    return f"<h2>{escape(section.title)}</h2>{notes}{table}"
