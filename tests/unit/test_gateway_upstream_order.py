"""Requests sent over one broker connection leave in the order they were sent, also while it connects."""

from __future__ import annotations

import asyncio
import struct

from workers.gateway.upstream import Upstream


def test_requests_sent_while_the_connection_is_made_leave_in_the_order_they_were_sent() -> None:
    async def scenario() -> list[int]:
        arrived: list[int] = []
        got_all = asyncio.Event()

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(arrived) < 3:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                arrived.append(struct.unpack_from(">i", frame, 4)[0])  # the header's correlation id
            got_all.set()
            writer.close()

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        upstream = Upstream("127.0.0.1", port, max_frame_bytes=1 << 20)

        def frame(correlation_id: int) -> bytes:
            return struct.pack(">hhih", 0, 9, correlation_id, -1)

        async def third() -> None:  # sent the moment the connection is up, while the second still waits
            while not upstream._ready:
                await asyncio.sleep(0)
            await upstream.send(frame(3), 3, expects_response=False)

        late = asyncio.create_task(third())
        await asyncio.sleep(0)
        first = asyncio.create_task(upstream.send(frame(1), 1, expects_response=False))
        second = asyncio.create_task(upstream.send(frame(2), 2, expects_response=False))
        await asyncio.gather(first, second, late)
        await asyncio.wait_for(got_all.wait(), 5)
        server.close()
        return arrived

    assert asyncio.run(scenario()) == [1, 2, 3]
