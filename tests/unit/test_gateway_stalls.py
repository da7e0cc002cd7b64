"""A connection's reader or writer stuck on one request is reported with the await it is stuck in."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from switchyard.frames.protocol import encode_request
from workers.gateway.process.stalls import REPORT_AFTER_S, Waiting, waiting_in
from workers.gateway.routing import apis

pytestmark = pytest.mark.unit


async def _inner(never: asyncio.Future[None]) -> None:
    await never


async def _outer(never: asyncio.Future[None]) -> None:
    await _inner(never)


def _request(api_key: int, version: int, **fields: object) -> Waiting:
    request = encode_request(api_key, version, fields, client_id="c", correlation_id=7)
    return Waiting(request, asyncio.sleep(0), since=100.0)


def test_the_chain_of_awaits_a_stuck_task_is_in_is_named_down_to_its_future() -> None:
    async def main() -> str:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(_outer(never))
        await asyncio.sleep(0.01)
        try:
            return waiting_in(task)
        finally:
            task.cancel()

    chain = asyncio.run(main())
    outer, inner, bottom = chain.split(" > ")
    assert outer.startswith("_outer:"), chain
    assert inner.startswith("_inner:"), chain
    assert bottom.startswith("FutureIter") or bottom == "Future(pending)", chain


def test_a_request_is_reported_once_it_has_waited_long_and_a_long_poll_never() -> None:
    async def main() -> tuple[str | None, str | None, str | None]:
        produce = _request(
            apis.PRODUCE, 7, transactional_id=None, acks=-1, timeout=timedelta(seconds=30), topic_data=()
        )
        fetch = _request(
            apis.FETCH, 4, replica_id=-1, max_wait=timedelta(milliseconds=500), min_bytes=1, max_bytes=1,
            isolation_level=0, topics=(),
        )  # fmt: skip
        early = produce.report("writing", 100.0 + REPORT_AFTER_S - 1)
        late = produce.report("writing", 100.0 + REPORT_AFTER_S + 1)
        polled = fetch.report("writing", 100.0 + 10 * REPORT_AFTER_S)
        for waiting in (produce, fetch):
            await waiting.on
        return early, late, polled

    early, late, polled = asyncio.run(main())
    assert early is None
    assert polled is None
    assert late is not None
    assert late.startswith("writing produce (correlation id 7) for 21 s; waiting in "), late
