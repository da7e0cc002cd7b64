"""`switchyard gateway`: run one gateway instance until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import signal

import click

from switchyard.cli.base import config_of
from switchyard.routing.zk import connect, disconnect
from workers.gateway.server import Gateway


async def serve(gateway: Gateway) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await gateway.start()
    try:
        await stop.wait()
    finally:
        await gateway.stop()


@click.command("gateway")
@click.option("--id", "gateway_id", help="This instance's id (default: gateway.id, then the host name).")
@click.pass_context
def gateway_command(ctx: click.Context, gateway_id: str | None) -> None:
    """Run the gateway: clients bootstrap to it and are routed by their bindings."""
    config = config_of(ctx, "gateway")
    zk = connect(config)
    try:
        asyncio.run(serve(Gateway(config, zk, gateway_id=gateway_id)))
    finally:
        disconnect(zk)
