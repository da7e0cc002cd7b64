"""`switchyard gateway`: run one gateway instance until SIGINT or SIGTERM (as several processes with
``gateway.processes``); `add-user` for SASL/PLAIN."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import click
import uvloop

from switchyard.cli.base import config_of, loaded_config
from switchyard.routing.zk import connect, disconnect
from workers.gateway.framing.sasl import user_line
from workers.gateway.process.processes import gateway_supervisor, member_id
from workers.gateway.process.server import Gateway
from workers.supervision import die_with_supervisor, say_serving


async def serve(gateway: Gateway) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await gateway.start()
        say_serving()
        await stop.wait()
    finally:
        await gateway.stop()


@click.group("gateway", invoke_without_command=True)
@click.option("--id", "gateway_id", help="This instance's id (default: gateway.id, then the host name).")
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    help="How many processes serve its ports together (default: gateway.processes).",
)
@click.option("--member", type=click.IntRange(0, 63), hidden=True, help="Serve as process N of several.")
@click.pass_context
def gateway_command(
    ctx: click.Context, gateway_id: str | None, processes: int | None, member: int | None
) -> None:
    """Run the gateway: clients bootstrap to it and are routed by their bindings."""
    if ctx.invoked_subcommand is not None:
        return
    count = processes or loaded_config(ctx).gateway.processes
    if count > 1 and member is None:
        config = config_of(ctx, "gateway-supervisor")  # its processes serve the metrics
        base = gateway_id or config.gateway.id or socket.gethostname()
        config_path = ctx.find_root().params.get("config_path")
        sys.exit(gateway_supervisor(config, config_path, base, count).run())
    if member is not None:
        die_with_supervisor()
    config = config_of(ctx, "gateway")
    if member is not None:
        gateway_id = member_id(gateway_id or config.gateway.id or socket.gethostname(), member)
    zk = connect(config)
    try:
        # uvloop: libuv's transports cost the gateway half the CPU per GiB that asyncio's own do
        # (docs/performance.md); the code runs on either loop, and the unit tests use asyncio's
        uvloop.run(serve(Gateway(config, zk, gateway_id=gateway_id, reuse_port=member is not None)))
    finally:
        disconnect(zk)


@gateway_command.command("add-user")
@click.argument("name")
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The users file (default: gateway.sasl.users_file).",
)
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.pass_context
def add_user(ctx: click.Context, name: str, path: Path | None, password_stdin: bool) -> None:
    """Add a SASL/PLAIN user (the AppID) to the users file, or change its password.

    Running gateways pick the change up at the next login; nothing needs restarting.
    """
    path = path or config_of(ctx).gateway.sasl.users_file
    if path is None:
        raise click.UsageError("no users file: pass --file or set gateway.sasl.users_file")
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise click.UsageError("the password is empty")
    try:
        line = user_line(name, password)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    kept = [ln for ln in lines if ln.rsplit(":", 4)[0] != name]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as out:  # mkstemp makes it 0600: the file holds hashes
        out.write("\n".join([*kept, line]) + "\n")
    os.replace(tmp, path)
    click.echo(f"{'changed' if len(kept) < len(lines) else 'added'} user {name} in {path}")
