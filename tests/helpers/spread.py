"""An application spread over many topics, for the tests and benchmarks of whole-cluster moves."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer


class SpreadApp:
    """One application: a producer writing numbered records round-robin over its topics, and a consumer
    group reading them all and committing after each batch, both through the gateway."""

    def __init__(self, bootstrap: str, topics: list[str], *, rate: float) -> None:
        self.name, self.topics, self.rate = f"spread-{uuid.uuid4().hex[:6]}", topics, rate
        self.acked: list[tuple[str, int]] = []
        self.failed: list[str] = []
        self.commit_errors: list[str] = []
        self.received: Counter[tuple[str, int]] = Counter()
        self.stop = threading.Event()
        self.producing = threading.Event()
        self.producing.set()
        self._producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"{self.name}@producer",
                                   "acks": "all", "linger.ms": 5})  # fmt: skip
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": f"{self.name}@consumer",
                                   "group.id": f"{self.name}-g", "enable.auto.commit": False,
                                   "auto.offset.reset": "earliest"})  # fmt: skip
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]
        for thread in self._threads:
            thread.start()

    def _produce(self) -> None:
        number = 0
        while self.producing.is_set():
            topic = self.topics[number % len(self.topics)]

            def done(err: Any, _: Any, topic: str = topic, value: int = number) -> None:
                if err is None:
                    self.acked.append((topic, value))
                else:
                    self.failed.append(str(err))

            self._producer.produce(topic, str(number).encode(), on_delivery=done)
            self._producer.poll(0)
            number += 1
            time.sleep(1 / self.rate)
        self._producer.flush(60)

    def _consume(self) -> None:
        self._consumer.subscribe(self.topics)
        while not self.stop.is_set():
            batch = [m for m in self._consumer.consume(200, 0.5) if m.error() is None]
            for message in batch:
                self.received[(message.topic() or "", int(message.value() or b"0"))] += 1
            if batch:
                try:
                    self._consumer.commit(asynchronous=False)
                except KafkaException as exc:  # as an application would: its batch may come again
                    self.commit_errors.append(str(exc.args[0]))
        self._consumer.close()

    @property
    def seen_everywhere(self) -> bool:
        """Each of its topics read (so the gateways saw it use them all)."""
        return {t for t, _ in self.received} == set(self.topics)

    @property
    def lost(self) -> list[tuple[str, int]]:
        return sorted(set(self.acked) - set(self.received))

    @property
    def twice(self) -> list[tuple[str, int]]:
        return sorted(k for k, n in self.received.items() if n > 1)

    def finish(self) -> None:
        """Stop producing; wait until everything acknowledged was read (up to 90 s); stop reading."""
        self.producing.clear()
        self._threads[0].join(90)
        deadline = time.monotonic() + 90
        while set(self.acked) - set(self.received) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.stop.set()
        self._threads[1].join(30)
