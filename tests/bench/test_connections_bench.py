"""A gateway's memory per client connection: 100, 1,000 and 5,000 connections opened at once against a
gateway of this module's own, first idle (ApiVersions answered, nothing forwarded), then active (each has
had a Metadata request forwarded, so it holds a broker connection of its own, as a producing or
consuming client's connection does). The gateway's RSS is read from /proc after each step; the figure
is the growth per connection. Costs that grow worse than linearly show as a per-connection figure that
rises with the count."""

from __future__ import annotations

import asyncio
import struct
import time

from kio.schema.metadata.v12.request import MetadataRequestTopic

from switchyard import kafka
from switchyard.config import Config
from switchyard.frames.protocol import encode_request
from switchyard.table import render
from tests.helpers.live import unique
from tests.helpers.processes import GatewayProcess, own_gateway
from tests.helpers.soak import read_process
from workers.gateway.routing import apis

COUNTS = (100, 1_000, 5_000)
OPENING_AT_ONCE = 200
SETTLE_S = 2.0
"""How long the gateway is left after each step before its memory is read (its buffers released)."""


gateway = own_gateway("gw-conns")


async def ask(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: int, version: int, **f: object
) -> None:
    request = encode_request(key, version, f, client_id="conns", correlation_id=1)
    writer.write(struct.pack(">i", len(request.frame)) + request.frame)
    await writer.drain()
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    await reader.readexactly(size)


async def measure(port: int, pid: int, count: int, topic: str) -> tuple[float, float, float]:
    """The gateway's RSS (MiB) before, with ``count`` idle connections, and with them active."""
    before = rss(pid)
    limit = asyncio.Semaphore(OPENING_AT_ONCE)
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def open_one() -> None:
        async with limit:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await ask(reader, writer, apis.API_VERSIONS, 3, client_software_name="conns",
                      client_software_version="1")  # fmt: skip
            streams.append((reader, writer))

    async def activate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with limit:
            await ask(reader, writer, apis.METADATA, 12, allow_auto_topic_creation=False,
                      topics=(MetadataRequestTopic(topic_id=None, name=topic),))  # fmt: skip

    try:
        await asyncio.gather(*(open_one() for _ in range(count)))
        await asyncio.sleep(SETTLE_S)
        idle = rss(pid)
        await asyncio.gather(*(activate(r, w) for r, w in streams))
        await asyncio.sleep(SETTLE_S)
        active = rss(pid)
    finally:
        for _, writer in streams:
            writer.close()
    return before, idle, active


def rss(pid: int) -> float:
    sample = read_process("gateway", pid, 0.0)
    assert sample is not None
    return sample.rss_mib


def test_memory_per_connection(gateway: GatewayProcess, stack_config: Config) -> None:
    assert gateway.process is not None
    topic = unique("conns")
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=1)
    rows = []
    for count in COUNTS:
        before, idle, active = asyncio.run(measure(gateway.port, gateway.process.pid, count, topic))
        rows.append((f"{count:,}", f"{before:.0f}", f"{idle:.0f}", f"{active:.0f}",
                     f"{(idle - before) * 1024 / count:.1f}", f"{(active - idle) * 1024 / count:.1f}",
                     f"{(active - before) * 1024 / count:.1f}"))  # fmt: skip
        time.sleep(SETTLE_S)  # the connections closed, the gateway's sessions ended
    print("\n\ngateway memory per client connection (RSS from /proc)")
    print(render(("CONNECTIONS", "RSS BEFORE MiB", "IDLE MiB", "ACTIVE MiB", "KiB PER IDLE",
                  "KiB MORE PER ACTIVE", "KiB PER ACTIVE"), rows))  # fmt: skip
