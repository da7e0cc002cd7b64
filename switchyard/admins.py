"""AdminClients kept per cluster, each replaced once a request of it failed in the client.

An AdminClient is kept because making one costs a connection and a metadata round, and a saga asks the
same clusters again and again. But a librdkafka (2.16) AdminClient that asked a group request
(ListConsumerGroupOffsets, DescribeConsumerGroups) while the group's broker was down may never get an
answer to one again once the broker is back: each times out, while its metadata requests are answered
and a new AdminClient is answered at once (the soak's switch after a broker restart failed on it three
times). Whether it does depends on how the request failed (timed out, or its connection lost) and when.
So a request asked through :meth:`Admins.asking` that fails in the client, whichever way, retires its
client, and the next makes a new one; an error the broker answered does not. It may have done so without
asking anything while the broker was down (the soak's worker, idle through the restart): a saga's step
asks a kept client with a short time-out and, failing, asks again at once on a new one
(:meth:`Admins.retried`), so such a client costs its step 2 s, not an attempt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from switchyard.wire import Wire

log = logging.getLogger(__name__)
T = TypeVar("T")
GROUP_REQUEST_TIMEOUT_S = 3600.0
"""librdkafka's own time-out for a group request (one its coordinator answers): the longest it takes.
Callers wait by a deadline of their own (``future.result(timeout)``) and leave the request running.
librdkafka (2.16, and its master in late 2026) frees a group request's state once this time-out passes
while the group's coordinator is still being looked up; the FindCoordinator answer arriving later
touches the freed state, and the process aborts (``rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0' failed``) or segfaults. Chaos trials lost workers and mirrors so, a broker killed or
frozen (librdkafka#4605 reports it of DescribeConsumerGroups). A request left to run does no harm: its
answer, when one comes, is dropped, and a client retired with it still pending frees it safely."""
KEPT_TIMEOUT_S = 2.0
"""A kept client's time-out in :meth:`Admins.retried`: a healthy cluster answers a group request in
milliseconds, and a slow one is asked again on a new client with the whole time-out."""


STALE_LEADER = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.NOT_COORDINATOR,
    }
)  # fmt: skip
"""Answers to a client whose idea of a partition's leader, or of a group's coordinator, is out of date.
librdkafka's AdminClient keeps its metadata for ``topic.metadata.refresh.interval.ms`` (five minutes):
after a broker restart a kept client's ListOffsets carried the old leader epoch, and every one was
refused FENCED_LEADER_EPOCH for the 2.5 minutes a saga's step was retried, clients held (a chaos trial).
Its coordinator for a group it keeps until the entry goes unused for ``metadata.max.age.ms`` or that
broker goes down, NOT_COORDINATOR answers or not: on clusters of three brokers a group sync's
ConsumerGroupDescribe on a kept client, which had found the coordinator while a broker was down, was
refused for the 30 s its step was retried once the group's offsets partition had gone back to that
broker, and the switch compensated (a chaos trial). A new client asks who the coordinator is."""


def failed_in_client(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, is a request a new client would not have failed:
    one that failed in the client — no answer in time, a connection lost (librdkafka's own error codes
    are negative; a broker's are not) — or one refused for the client's stale idea of a leader."""
    while exc is not None:
        if isinstance(exc, TimeoutError):
            return True
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            code = exc.args[0].code()
            return bool(code < 0 or code in STALE_LEADER)
        exc = exc.__cause__
    return False


class ClusterAdmin(AdminClient):
    """An AdminClient that knows its cluster's bootstrap servers: what librdkafka cannot ask safely is
    asked over Kafka's protocol directly, on its :class:`~switchyard.wire.Wire`."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__({"bootstrap.servers": bootstrap})
        self.wire = Wire(bootstrap)


class Admins:
    def __init__(self, bootstrap: Callable[[str], str]) -> None:
        self._bootstrap = bootstrap
        self._kept: dict[str, ClusterAdmin] = {}
        self._lock = threading.Lock()

    def get(self, cluster: str) -> ClusterAdmin:
        with self._lock:
            admin = self._kept.get(cluster)
            if admin is None:
                admin = self._kept[cluster] = ClusterAdmin(self._bootstrap(cluster))
            return admin

    @contextmanager
    def asking(self, cluster: str) -> Iterator[ClusterAdmin]:
        """``cluster``'s AdminClient, retired if a request of it fails."""
        admin = self.get(cluster)
        try:
            yield admin
        except Exception as exc:
            if failed_in_client(exc):
                self.retire(cluster, admin)
            raise

    def retried(
        self,
        clusters: Sequence[str],
        request: Callable[[list[ClusterAdmin], float], T],
        timeout_s: float = 10.0,
    ) -> T:
        """``request(clients, time-out)`` on the ``clusters``' kept clients at ``KEPT_TIMEOUT_S``; if it
        fails in the client, once more at once on new ones, at ``timeout_s`` (it must be idempotent)."""
        try:
            with ExitStack() as asked:
                return request([asked.enter_context(self.asking(c)) for c in clusters], KEPT_TIMEOUT_S)
        except Exception as exc:
            if not failed_in_client(exc):
                raise
            log.warning("%s: asking again on new admin clients: %r", ", ".join(clusters), exc)
        return request([self.get(c) for c in clusters], timeout_s)

    def retire(self, cluster: str, admin: ClusterAdmin) -> None:
        """Make the next request to ``cluster`` use a new client, unless ``admin`` was replaced already."""
        with self._lock:
            if self._kept.get(cluster) is admin:
                del self._kept[cluster]
                admin.wire.close()
