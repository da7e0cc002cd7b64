"""AdminClients kept per cluster, each replaced once a request of it failed.

An AdminClient is kept because making one costs a connection and a metadata round, and a saga asks the
same clusters again and again. But a librdkafka (2.16) AdminClient that asked a group request
(ListConsumerGroupOffsets, DescribeGroups) while the group's broker was down may never get an answer to
one again once the broker is back: each times out, while its metadata requests are answered and a new
AdminClient is answered at once (the soak's switch after a broker restart failed on it three times).
Whether it does depends on how the request failed (timed out, or its connection lost) and when. So a
request that fails in the client, whichever way, retires its client, and the next makes a new one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient


def failed_in_client(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an error it was raised from, is a request that failed in the client (no
    answer in time, a connection lost, an error the broker answered), not a refusal of Switchyard's."""
    while exc is not None:
        if isinstance(exc, (TimeoutError, KafkaException)):
            return True
        exc = exc.__cause__
    return False


class Admins:
    def __init__(self, bootstrap: Callable[[str], str]) -> None:
        self._bootstrap = bootstrap
        self._kept: dict[str, AdminClient] = {}
        self._lock = threading.Lock()

    def get(self, cluster: str) -> AdminClient:
        with self._lock:
            admin = self._kept.get(cluster)
            if admin is None:
                admin = self._kept[cluster] = AdminClient({"bootstrap.servers": self._bootstrap(cluster)})
            return admin

    @contextmanager
    def asking(self, cluster: str) -> Iterator[AdminClient]:
        """``cluster``'s AdminClient, retired if a request of it fails."""
        admin = self.get(cluster)
        try:
            yield admin
        except Exception as exc:
            if failed_in_client(exc):
                self.retire(cluster, admin)
            raise

    def retire(self, cluster: str, admin: AdminClient) -> None:
        """Make the next request to ``cluster`` use a new client, unless ``admin`` was replaced already."""
        with self._lock:
            if self._kept.get(cluster) is admin:
                del self._kept[cluster]
