"""Applications bound to the primary behind a link the mirror copies: the set-up every switch test and
bench starts from."""

from __future__ import annotations

import time

from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore

ACTOR = "user:test"


def linked(
    routing: RoutingStore,
    link: str,
    apps: list[str],
    topics: list[str],
    partitions: int,
    *,
    timeout_s: float = 60,
    source: str = "primary",
    target: str = "standby",
) -> str:
    """Link ``link`` copying ``topics`` (already on ``source``) to ``target``, each of ``apps`` bound to
    ``source`` and every gateway told, and the mirror copying all ``partitions`` of them; the link."""
    routing.create_link(link, source, target, include=topics, actor=ACTOR, reason="test set-up")
    epoch = 0
    for app in apps:
        epoch = routing.set_binding(BindingKey.for_app(app), source, actor=ACTOR, reason="test set-up")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=30)
    deadline = time.monotonic() + timeout_s
    while sum(len(m.partitions) for m in read_status(routing.zk, routing.layout, link)) < partitions:
        assert time.monotonic() < deadline, f"the mirror never took up link {link}"
        time.sleep(0.2)
    return link
