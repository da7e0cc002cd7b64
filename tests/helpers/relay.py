"""A plain byte relay: what a Kafka proxy of the gateway's design (Python, asyncio, one connection to the
broker per client connection) costs when it does nothing but forward — the ceiling the gateway is
measured against in ``make bench``. Bytes are not parsed, not even into frames.

Run as a process of its own, so its CPU time is its own: ``python -m tests.helpers.relay PORT HOST:PORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

_CHUNK = 1 << 16


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _relay(port: int, host: str, target: int) -> None:
    async def serve(client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        try:
            broker, to_broker = await asyncio.open_connection(host, target)
        except OSError:
            to_client.close()
            return
        await asyncio.gather(_pump(client, to_broker), _pump(broker, to_client))

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, target = int(sys.argv[1]), sys.argv[2]
    host, _, target_port = target.rpartition(":")
    asyncio.run(_relay(port, host, int(target_port)))


if __name__ == "__main__":
    main()
