"""`switchyard verify` and `switchyard reconcile`: the Spark jobs, with progress and a summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from switchyard.cli.base import Group, cli, config_of, link_of, store_of
from switchyard.config import Config
from switchyard.errors import BindingRefused
from switchyard.model import now
from switchyard.table import render
from switchyard.verify.submit import (
    JobResult,
    Progress,
    lost_window_spec,
    new_run_id,
    run_job,
    verdict,
    verify_spec,
)


def _progress(progress: Progress) -> None:
    """A bar of the job's tasks, redrawn in place on a terminal, a line per change otherwise."""
    width = 30
    filled = width * progress.done // progress.total if progress.total else 0
    line = f"  [{'#' * filled}{'.' * (width - filled)}] {progress}"
    if sys.stderr.isatty():
        click.echo(f"\r{line}\033[K", err=True, nl=False)
    else:
        click.echo(line, err=True)


def _run(config: Config, spec: dict[str, Any]) -> JobResult:
    job = run_job(config, spec, on_progress=_progress)
    if sys.stderr.isatty():
        click.echo("", err=True)  # the bar's line is done
    return job


@cli.command("verify")
@click.argument("link_id")
@click.option(
    "--topic", "topics", multiple=True, help="Only these topics (default: every topic the link copies)."
)
@click.option(
    "--group", "groups", multiple=True, help="Only these groups (default: every group on the source)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the whole findings document as JSON.")
@click.pass_context
def verify(
    ctx: click.Context, link_id: str, topics: tuple[str, ...], groups: tuple[str, ...], as_json: bool
) -> None:
    """Compare LINK_ID's copy with its source, record by record, on Spark; exit 1 when they differ.

    Verify a drained or paused link: records not copied yet are reported missing.
    """
    config = config_of(ctx)
    with store_of(ctx) as store:
        link = link_of(store, link_id)
        spec = verify_spec(config, link, topics=topics, groups=groups or None)
        click.echo(
            f"verifying {len(spec['partitions'])} partitions of link {link_id} on {config.spark.master}",
            err=True,
        )
        job = _run(config, spec)
        run_id, outcome = new_run_id(), verdict(job.result)
        store.ledger.record_verification(
            run_id, link_id, job.result, verdict=outcome, started_at=job.started_at,
            finished_at=job.finished_at, master=job.master,
        )  # fmt: skip
    if as_json:
        click.echo(json.dumps({"run": run_id, "verdict": outcome, **job.result}, indent=2))
    else:
        _summary(job.result)
        seconds = (job.finished_at - job.started_at).total_seconds()
        click.echo(f"verdict: {outcome} (run {run_id}, {seconds:.1f} s)")
    if outcome != "clean":
        ctx.exit(1)


def _summary(result: dict[str, object]) -> None:
    partitions = result["partitions"]
    assert isinstance(partitions, list)
    rows = [
        (
            f"{p['topic']}[{p['partition']}]",
            p["records"],
            p["missing"],
            p["extra"],
            p["mismatched"],
            p["misaligned"],
        )
        for p in partitions
    ]
    click.echo(render(("PARTITION", "RECORDS", "MISSING", "EXTRA", "MISMATCHED", "MISALIGNED"), rows))
    for p in partitions:
        for example in p["examples"]:
            click.echo(f"  {p['topic']}[{p['partition']}]: {example}")
    groups = result.get("groups", [])
    assert isinstance(groups, list)
    wrong = [g for g in groups if not g["ok"]]
    click.echo(f"groups: {len(groups) - len(wrong)} of {len(groups)} offsets point at the right record")
    for g in wrong:
        click.echo(f"  {g['group']} {g['topic']}[{g['partition']}]: {g['detail']}")


@cli.group(cls=Group)
def reconcile() -> None:
    """After an unplanned failover: the records the old primary holds that were never copied."""


@reconcile.command("find")
@click.argument("link_id")
@click.option(
    "--parquet",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write the lost window (a directory).",
)
@click.pass_context
def find(ctx: click.Context, link_id: str, parquet: Path) -> None:
    """Export the lost window of LINK_ID (its source beyond what was copied) to Parquet, and count it."""
    config = config_of(ctx)
    with store_of(ctx) as store:
        link = link_of(store, link_id)
        spec = lost_window_spec(config, link, str(parquet))
        if not spec["partitions"]:
            click.echo(f"link {link_id}: the source holds nothing beyond what was copied")
            return
        job = _run(config, spec)
        run_id = new_run_id()
        store.ledger.record_reconciliation(
            run_id,
            link_id,
            job.result,
            parquet=str(parquet),
            started_at=job.started_at,
            finished_at=job.finished_at,
        )
    exported = job.result["exported"]
    rows = [
        (f"{e['topic']}[{e['partition']}]", e["records"])
        for e in sorted(exported, key=lambda e: (e["topic"], e["partition"]))
    ]
    click.echo(render(("PARTITION", "LOST RECORDS"), rows))
    click.echo(f"{sum(e['records'] for e in exported)} records written to {parquet} (run {run_id})")
    click.echo(f"to write them to {link.target}: switchyard reconcile republish {run_id}")


@reconcile.command("republish")
@click.argument("run_id")
@click.pass_context
def republish(ctx: click.Context, run_id: str) -> None:
    """Write a lost window found by `reconcile find` to the link's target, once."""
    config = config_of(ctx)
    with store_of(ctx) as store:
        run = store.ledger.reconciliation(run_id)
        if run is None:
            raise click.ClickException(f"no reconciliation run {run_id}")
        link = link_of(store, run["link_id"])
        if not store.ledger.claim_republish(run_id, at=now()):
            raise BindingRefused(
                f"run {run_id} was already republished (at {run['republished_at']}): not twice"
            )
        target = config.clusters[link.target].bootstrap
        spec = {"mode": "republish", "link": link.id, "source": "", "target": target, "partitions": [],
                "parquet": run["parquet"]}  # fmt: skip
        job = _run(config, spec)
        store.ledger.finish_republish(run_id, job.result["republished"])
    click.echo(f"{job.result['republished']} records written to {link.target} (run {run_id})")
