"""The compatibility application on kafka-python, at its default settings (see :mod:`app_io`)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from tests.compat.app_io import Events, arguments, paced, parts, per_codec, run_all, value_of


def produce(args: Any, events: Events) -> None:
    producers = per_codec(
        args,
        lambda codec: KafkaProducer(
            bootstrap_servers=args.bootstrap, client_id=f"{args.app}@producer", acks="all", **codec
        ),
        "compression_type",
    )
    attempted = 0
    for n in paced(args.rate, events):
        attempted = n + 1
        producer = producers[n % len(producers)]
        try:
            future = producer.send(args.topic, key=str(n).encode(), value=value_of(n))
        except KafkaError as exc:  # refused at once (no metadata in time, buffer full): no callback comes
            events("failed", v=n, e=repr(exc))
            continue
        future.add_callback(lambda md, n=n: events("acked", v=n, p=md.partition, o=md.offset))
        future.add_errback(lambda exc, n=n: events("failed", v=n, e=repr(exc)))
    for producer in producers:
        producer.flush()  # no time-out: returns once every record has its report
    events("produced", n=attempted)
    for producer in producers:
        producer.close()


def consume(args: Any, events: Events, group: str, *, manual: bool) -> None:
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        client_id=f"{args.app}@{'consumer' if manual else 'auto'}",
        group_id=group,
        auto_offset_reset="earliest",
        **({"enable_auto_commit": False} if manual else {}),
        **({"session_timeout_ms": args.session_ms, "heartbeat_interval_ms": 1000} if args.session_ms else {}),
    )
    while not events.stopping():
        try:
            polled = consumer.poll(timeout_ms=200)
        except KafkaError as exc:  # its only bootstrap refused a connection (a gateway restarting)
            if not exc.retriable:
                raise
            events("retried", g="manual" if manual else "auto", e=repr(exc))
            time.sleep(0.2)
            continue
        records = [[tp.partition, r.offset, int(r.value)] for tp, rs in polled.items() for r in rs]
        if not records:
            continue
        error = None
        if manual:
            try:
                consumer.commit()
            except Exception as exc:
                error = type(exc).__name__
        events("batch", g="manual" if manual else "auto", recs=records, commit=error)
    consumer.close()


def main() -> int:
    logging.basicConfig(format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)  # joins and rebalances, for the log
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
