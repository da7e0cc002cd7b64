"""`switchyard report`: a saga's or a drill's report, from the ledger alone — as text, as one JSON document
(``--json``) or as one self-contained HTML page with plots (``--html FILE``) — and the drills of a period
(``--since 30d``). Everything is judged against the configuration's ``drills.objectives``.

Only the ledger is read: a report works after Temporal has forgotten the run, and for a run stopped
halfway (its verdict is then ``incomplete``).
"""

from __future__ import annotations

import json
from contextlib import closing
from datetime import timedelta
from pathlib import Path

import click

from switchyard.cli.base import SAGA, cli, config_of
from switchyard.cli.drills import DURATION
from switchyard.ledger import Ledger
from switchyard.model import now
from switchyard.reports.build import report_of
from switchyard.reports.document import document
from switchyard.reports.history import HEADERS, Period, drills_since, period_document, rows
from switchyard.reports.model import Report
from switchyard.reports.text import text_report
from switchyard.sagas.drills import Objectives
from switchyard.table import render


@cli.command("report")
@click.argument("ref", metavar="[SAGA_OR_RUN]", required=False, type=SAGA)
@click.option(
    "--since", "since", type=DURATION, metavar="PERIOD",
    help="The drills started this long ago or later: 30d, 12h, 90m, 45s, 1h30m.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
    help="Write one self-contained HTML page with plots to this file.",
)  # fmt: skip
@click.pass_context
def report(
    ctx: click.Context, ref: str | None, since: timedelta | None, as_json: bool, html_path: Path | None
) -> None:
    """The report of a saga or drill run — SAGA_OR_RUN is a run id, or a saga id for its newest run — or,
    with --since, a table of the drills of that period; each judged against the objectives."""
    if (ref is None) == (since is None):
        raise click.UsageError("give a saga or run id, or --since PERIOD, not both")
    config = config_of(ctx)
    objectives = Objectives(**config.drills.objectives.model_dump())
    subject: Report | Period
    with closing(Ledger.open(config.ledger_url)) as ledger:
        if ref is not None:
            subject = report_of(ledger, ref, objectives)
            doc, text = document(subject), text_report(subject)
        else:
            assert since is not None
            subject = drills_since(ledger, now() - since, objectives, lambda line: click.echo(line, err=True))
            doc = period_document(subject)
            text = (render(HEADERS, rows(subject)) + "\n" if subject.reports else "") + subject.summary()
    if html_path is not None:
        from switchyard.reports.html import html_period, html_report  # matplotlib: only when drawing

        page = html_report(subject) if isinstance(subject, Report) else html_period(subject)
        try:
            html_path.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise click.FileError(str(html_path), exc.strerror) from None
        click.echo(f"wrote {html_path}", err=True)
    if as_json:
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    elif html_path is None:
        click.echo(text)
