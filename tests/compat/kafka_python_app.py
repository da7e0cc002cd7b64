"""The compatibility application on kafka-python, at its default settings (see :mod:`app_io`)."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
from typing import Any

from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError

from tests.compat.app_io import DEBUG_LOG, Events, arguments, paced, parts, per_codec, run_all, value_of


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
        sent = time.time()
        try:
            future = producer.send(args.topic, key=str(n).encode(), value=value_of(n))
        except KafkaError as exc:  # refused at once (no metadata in time, buffer full): no callback comes
            events("failed", v=n, e=repr(exc))
            continue
        future.add_callback(lambda md, n=n, at=sent: events("acked", v=n, p=md.partition, o=md.offset, s=at))
        future.add_errback(lambda exc, n=n: events("failed", v=n, e=repr(exc)))
    for producer in producers:
        producer.flush()  # no time-out: returns once every record has its report
    events("produced", n=attempted)
    for producer in producers:
        producer.close()


def subscribe_once_known(consumer: KafkaConsumer, topic: str, events: Events) -> None:
    """Subscribe once the topic's partitions are in the consumer's metadata. Subscribed before, kafka-python
    3.0.12's first generation assigns nothing and the consumer joins again when the partitions come;
    where that second join and its sync outlast a poll, the sync's answer is never read (the client
    waits for a pending join only while its rejoin flag is set: ``coordinator/base.py``, read), and the
    consumer stays without an assignment or heartbeats for good: a suite run's stall, before any switch
    (docs/testbed.md)."""
    while not events.stopping():
        try:
            if consumer.partitions_for_topic(topic):
                break
        except KafkaError as exc:  # its only bootstrap refused a connection (a gateway restarting)
            if not exc.retriable:
                raise
        time.sleep(0.2)
    consumer.subscribe([topic])


def consume(args: Any, events: Events, group: str, *, manual: bool) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        client_id=f"{args.app}@{'consumer' if manual else 'auto'}",
        group_id=group,
        auto_offset_reset="earliest",
        **({"enable_auto_commit": False} if manual else {}),
        **({"session_timeout_ms": args.session_ms, "heartbeat_interval_ms": 1000} if args.session_ms else {}),
    )
    subscribe_once_known(consumer, args.topic, events)
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


FORMAT = "%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s"
QUIET = ("kafka.protocol", "kafka.net.transport", "kafka.consumer.fetcher", "kafka.producer")
"""Left out of the debug log: bytes parsed and written, each record batch and each fetch position."""


class Cut(logging.Formatter):
    """Lines cut to 400 characters: a Fetch's or Produce's answer holds its records."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record)[:400]


def log_to(directory: str) -> None:
    """Warnings, and the coordinator's joins and rebalances, to stderr (the application's log); the
    requests, answers and group steps kafka-python logs in debug to ``DEBUG_LOG``."""
    shown = logging.StreamHandler()
    shown.setFormatter(logging.Formatter(FORMAT))
    shown.addFilter(lambda r: r.levelno >= logging.WARNING or r.name.startswith("kafka.coordinator"))
    shown.setLevel(logging.INFO)
    debug = logging.handlers.RotatingFileHandler(
        os.path.join(directory, DEBUG_LOG), maxBytes=16 << 20, backupCount=1
    )
    debug.setFormatter(Cut(FORMAT))
    debug.addFilter(lambda r: r.name == "kafka.producer.sender" or not r.name.startswith(QUIET))
    logging.getLogger().addHandler(shown)
    kafka = logging.getLogger("kafka")
    kafka.setLevel(logging.DEBUG)
    kafka.addHandler(debug)


def main() -> int:
    args = arguments()
    log_to(args.dir)
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
