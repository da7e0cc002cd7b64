"""The compatibility application on confluent-kafka (librdkafka), at its default settings (see
:mod:`app_io`)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from switchyard.traffic import debug_log
from tests.compat.app_io import Events, arguments, paced, parts, per_codec, run_all, value_of


def produce(args: Any, events: Events) -> None:
    settings = {"bootstrap.servers": args.bootstrap, "client.id": f"{args.app}@producer", "acks": "all"}
    producers = per_codec(args, lambda codec: Producer({**settings, **codec}), "compression.type")

    def delivered(err: Any, msg: Any, n: int, sent: float) -> None:
        if err is None:
            events("acked", v=n, p=msg.partition(), o=msg.offset(), s=sent)
        else:
            events("failed", v=n, e=str(err))

    attempted = 0
    for n in paced(args.rate, events):
        attempted = n + 1
        producer = producers[n % len(producers)]
        sent = time.time()
        try:
            producer.produce(args.topic, key=str(n).encode(), value=value_of(n),
                             on_delivery=lambda e, m, n=n, at=sent: delivered(e, m, n, at))  # fmt: skip
        except (BufferError, KafkaException) as exc:  # refused at once: no delivery report will come
            events("failed", v=n, e=repr(exc))
        for each in producers:  # every producer's delivery reports, not only this one's
            each.poll(0)
    # records still queued when flush gives up never get a report: counted, so none vanishes unseen;
    # one 120 s deadline for all the producers, as for one
    deadline = time.monotonic() + 120
    unreported = sum(p.flush(max(deadline - time.monotonic(), 0)) for p in producers)
    events("produced", n=attempted, unreported=unreported)


def consume(args: Any, events: Events, group: str, *, manual: bool) -> None:
    settings = {
        "bootstrap.servers": args.bootstrap,
        "client.id": f"{args.app}@{'consumer' if manual else 'auto'}",
        "group.id": group,
        "auto.offset.reset": "earliest",
    }
    if args.group_protocol:
        settings["group.protocol"] = args.group_protocol
    if args.session_ms and args.group_protocol != "consumer":  # the new protocol's are the broker's
        settings |= {"session.timeout.ms": args.session_ms, "heartbeat.interval.ms": 1000}
    group_kind = "manual" if manual else "auto"
    if debug := os.environ.get("SWITCHYARD_TRAFFIC_DEBUG"):  # librdkafka's own account, beside the events
        settings |= {"debug": debug, "logger": debug_log(f"{args.app}-{group_kind}", Path(args.dir))}
    consumer = Consumer({**settings, **({"enable.auto.commit": False} if manual else {})})

    def rebalanced(what: str) -> Callable[[Any, list[Any]], None]:
        """Noted only, for reading a run afterwards; the client assigns and unassigns as by default."""
        return lambda _, partitions: events("rebalance", g=group_kind, what=what,
                                            parts=[p.partition for p in partitions])  # fmt: skip

    consumer.subscribe(
        [args.topic],
        on_assign=rebalanced("assign"),
        on_revoke=rebalanced("revoke"),
        on_lost=rebalanced("lost"),
    )
    while not events.stopping():
        messages = consumer.consume(500, 0.2)
        for m in messages:
            if m.error() is not None:
                events("error", g="manual" if manual else "auto", e=str(m.error()))
        records = [[m.partition(), m.offset(), int(m.value())] for m in messages if m.error() is None]
        if not records:
            continue
        error = None
        if manual:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as exc:
                error = exc.args[0].name()
        events("batch", g="manual" if manual else "auto", recs=records, commit=error)
    consumer.close()


def main() -> int:
    args = arguments()
    events = Events(args.dir)
    return run_all(
        events,
        parts(
            args,
            lambda: produce(args, events),
            lambda group, manual: consume(args, events, group, manual=manual),
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
