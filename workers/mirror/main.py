"""`switchyard mirror`: run one mirror process, supervised (:mod:`workers.supervision`), until SIGINT or
SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

import click

from switchyard.cli.base import config_of
from switchyard.ledger import Ledger
from switchyard.mirror.status import default_member_id
from switchyard.routing.zk import connect, disconnect
from workers.mirror.process import MirrorProcess
from workers.supervision import Supervisor, die_with_supervisor, say_serving, switchyard_command


@click.command("mirror")
@click.option("--id", "member", help="This process's name among mirror processes (default: the host name).")
@click.option("--supervised", is_flag=True, hidden=True, help="Be the process the command supervises.")
@click.pass_context
def mirror_command(ctx: click.Context, member: str | None, supervised: bool) -> None:
    """Copy the topics of every link, offset for offset, and keep consumer group offsets in step."""
    if not supervised:
        config_of(ctx, "mirror-supervisor")  # a bad configuration stops the command here, its key named
        name = member or default_member_id()
        command = switchyard_command(ctx.find_root().params.get("config_path"), "mirror", "--id", name)
        sys.exit(Supervisor("mirror", lambda _index: [*command, "--supervised"], 1).run())
    die_with_supervisor()
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
        say_serving()
        stop.wait()
    finally:
        process.stop()
        ledger.close()
        disconnect(zk)
