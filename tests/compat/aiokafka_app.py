"""The compatibility application on aiokafka, at its default settings (see :mod:`app_io`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from tests.compat.app_io import Events, arguments, per_codec, value_of


async def produce(args: Any, events: Events) -> None:
    producers = per_codec(
        args,
        lambda codec: AIOKafkaProducer(
            bootstrap_servers=args.bootstrap, client_id=f"{args.app}@producer", acks="all", **codec
        ),
        "compression_type",
    )
    for producer in producers:
        await producer.start()
    pending: set[asyncio.Future[Any]] = set()
    n = 0  # the sends attempted
    while not events.stopping("stop-producing"):
        try:
            delivery = await producers[n % len(producers)].send(
                args.topic, key=str(n).encode(), value=value_of(n)
            )
        except KafkaError as exc:  # refused at once (no metadata in time): no delivery will come
            events("failed", v=n, e=repr(exc))
        else:
            sent = time.time()
            delivery.add_done_callback(lambda f, n=n, at=sent: delivered(events, n, f, at))
            pending.add(delivery)
            delivery.add_done_callback(pending.discard)
        n += 1
        await asyncio.sleep(1 / args.rate)
    for producer in producers:
        await producer.flush()
    if pending:
        await asyncio.wait(pending)
    events("produced", n=n)
    for producer in producers:
        await producer.stop()


def delivered(events: Events, n: int, future: asyncio.Future[Any], sent: float) -> None:
    if future.exception() is not None:
        events("failed", v=n, e=repr(future.exception()))
    else:
        md = future.result()
        events("acked", v=n, p=md.partition, o=md.offset, s=sent)


async def consume(args: Any, events: Events, group: str, *, manual: bool) -> None:
    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        client_id=f"{args.app}@{'consumer' if manual else 'auto'}",
        group_id=group,
        auto_offset_reset="earliest",
        **({"enable_auto_commit": False} if manual else {}),
        **({"session_timeout_ms": args.session_ms, "heartbeat_interval_ms": 1000} if args.session_ms else {}),
    )
    await consumer.start()
    while not events.stopping():
        polled = await consumer.getmany(timeout_ms=200)
        records = [[tp.partition, r.offset, int(r.value)] for tp, rs in polled.items() for r in rs]
        if not records:
            continue
        error = None
        if manual:
            try:
                await consumer.commit()
            except Exception as exc:
                error = type(exc).__name__
        events("batch", g="manual" if manual else "auto", recs=records, commit=error)
    await consumer.stop()


async def main() -> None:
    args = arguments()
    events = Events(args.dir)
    try:
        groups = [(args.group, True), (args.auto_group, False)] if args.group else []
        await asyncio.gather(
            produce(args, events), *(consume(args, events, group, manual=manual) for group, manual in groups)
        )
    except BaseException as exc:  # said in the events too; the traceback and exit code 1 follow
        events("error", g="app", e=repr(exc))
        raise


if __name__ == "__main__":
    asyncio.run(main())
