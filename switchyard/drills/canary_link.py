"""A canary application's own corner of the estate: a topic, a link copying exactly that topic, and its
AppID bound to the source — so switching it (promoting its link) moves nobody else — and tidying it away.

``make demo`` and the DR drills both run one.
"""

from __future__ import annotations

import time

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import BindingRefused
from switchyard.keys import BindingKey
from switchyard.mirror.control import delete_link
from switchyard.mirror.status import read_status
from switchyard.model import BindingState, LinkState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.locks import SagaLocks
from switchyard.routing.store import RoutingStore

TAKE_UP_S = 60.0
"""How long a mirror process may take to report every partition of a new link."""


def make_own_link(
    config: Config,
    store: RoutingStore,
    *,
    app: str,
    topic: str,
    link_id: str,
    source: str,
    target: str,
    partitions: int,
    actor: str,
    reason: str,
) -> None:
    """The topic on ``source``, ``link_id`` copying exactly it to ``target``, ``app`` bound to ``source``
    and every gateway routing it there, a mirror copying every partition. Idempotent: a retry finds what
    an earlier attempt made and goes on."""
    for link in store.snapshot().links.values():
        if (
            link.id != link_id
            and link.target == target
            and link.state is not LinkState.PROMOTED
            and link.copies(topic)
        ):
            raise BindingRefused(
                f"link {link.id} would copy {topic} to {target} too (two writers of one copy): pause or "
                f"delete it first (switchyard links delete {link.id} --force)"
            )
    kafka.create_topics(config.clusters[source].bootstrap, [topic], partitions=partitions)
    if store.link(link_id) is None:
        store.create_link(link_id, source, target, include=[topic], actor=actor, reason=reason)
    key = BindingKey.for_app(app)
    locked = SagaLocks(store.zk, store.layout).holder(key)
    if locked is not None:  # a switch of it is under way (an earlier drill's, which finishes on its own)
        raise BindingRefused(f"{app} is locked by saga {locked.owner}: it is being switched; try again later")
    bound = store.binding(key)
    if bound is not None and bound.state is BindingState.BLOCKED:
        raise BindingRefused(
            f"{app} is blocked (epoch {bound.epoch}): a saga is switching it, or one was interrupted "
            "(switchyard sagas list; switchyard bindings show)"
        )
    if bound is None or bound.cluster != source:
        epoch = store.set_binding(key, source, actor=actor, reason=reason)
        wait_for_acks(store.zk, store.layout, epoch, timeout_s=15)
    deadline = time.monotonic() + TAKE_UP_S
    while sum(len(m.partitions) for m in read_status(store.zk, store.layout, link_id)) < partitions:
        if time.monotonic() > deadline:
            raise BindingRefused(f"no mirror process took up link {link_id} in {TAKE_UP_S:g}s: see its log")
        time.sleep(0.2)


def delete_links(
    config: Config, store: RoutingStore, links: list[str], *, actor: str, reason: str
) -> list[str]:
    """Delete those of ``links`` that exist (whatever state a switch left them in); return them."""
    gone = []
    for link_id in dict.fromkeys(links):
        if store.link(link_id) is not None:
            delete_link(config, store, link_id, actor=actor, reason=reason, force=True)
            gone.append(link_id)
    return gone
