"""`switchyard mirror`: run one mirror process until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from switchyard.cli.base import config_of
from switchyard.ledger import Ledger
from switchyard.mirror.status import default_member_id
from switchyard.routing.zk import connect, disconnect
from workers.mirror.process import MirrorProcess


@click.command("mirror")
@click.option("--id", "member", help="This process's name among mirror processes (default: the host name).")
@click.pass_context
def mirror_command(ctx: click.Context, member: str | None) -> None:
    """Copy the topics of every link, offset for offset, and keep consumer group offsets in step."""
    config = config_of(ctx, "mirror")
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    zk = connect(config)
    ledger = Ledger.open(config.ledger_url)
    process = MirrorProcess(config, zk, ledger, member or default_member_id())
    try:
        process.start()
        stop.wait()
    finally:
        process.stop()
        ledger.close()
        disconnect(zk)
