"""Splitting a link: some of its topics go to a link of their own, so that a switch promotes only those.

A switch promotes the link it moves its keys along, and a promoted link's topics are the reverse link's
alone on the old source. When the link also carries topics of applications that stay there, the switch
first moves its keys' topics to a new link, between the same clusters, which it then promotes; the old
link keeps copying the rest (see :mod:`switchyard.sharing`).

The copy must go on exactly where it was, by exactly one writer: the old link gives the topics up first
(it excludes them by name, a fenced change in the ledger), and only once every mirror process of it has
listed its topics under that change (so none can be assigned one of them again) and holds none of their
partitions are its offset-map segments for them stored under the new link and the new link made. A
mirror process taking the new link up finds the target's ends and the map as the old link left them,
and resumes from there. Each stage finds what an earlier attempt did, so a retried step goes on.
While the old link has let the topics go and the new one is not made yet (seconds), nothing copies them:
the source keeps their records, and the switch's drain waits for the new link to catch up.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from switchyard.config import Config
from switchyard.errors import BindingRefused
from switchyard.mirror.mapstore import read_link, segment_record, store_records
from switchyard.mirror.status import read_status
from switchyard.model import LinkState
from switchyard.routing import LinkChange, RoutingStore

_POLL_S = 0.2


def split_link(
    config: Config,
    store: RoutingStore,
    link_id: str,
    new_id: str,
    topics: list[str],
    *,
    actor: str,
    reason: str,
    wait_s: float,
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Move ``topics`` of link ``link_id`` to a new link ``new_id`` and return the epoch it was made at
    (0: made already)."""
    if store.link(new_id) is not None:
        return 0
    old = store.link(link_id)
    if old is None:
        raise BindingRefused(f"link {link_id!r} does not exist: nothing to split")
    if old.state is not LinkState.RUNNING:
        raise BindingRefused(f"link {link_id} is {old.state}: only a running link is split")
    names = set(topics)
    patterns = tuple(re.escape(t) for t in sorted(names))
    excluded = tuple(p for p in patterns if p not in old.exclude)
    given_up = old.epoch  # by an earlier attempt (the link's epoch is at least that change's)
    if excluded:
        change = LinkChange(
            old.id, old.epoch, old.source, old.target, old.include, old.exclude + excluded, old.state,
            old.reverse_of,
        )  # fmt: skip
        why = f"{reason}: {', '.join(sorted(names))} move to {new_id}"
        given_up = store.apply([change], actor=actor, reason=why)
    _wait_let_go(store, link_id, names, epoch=given_up, wait_s=wait_s, progress=progress)
    now_old = store.link(link_id)  # an attempt gone on past the saga's compensation must not go on
    if now_old is None or not set(patterns) <= set(now_old.exclude):
        raise BindingRefused(f"link {link_id} took {', '.join(sorted(names))} back meanwhile: not split")
    target = config.clusters[old.target].bootstrap
    maps = read_link(target, link_id).maps
    store_records(
        target,
        (
            segment_record(new_id, t, p, s, tt)
            for (t, p), m in maps.items()
            if t in names
            for s, tt in m.segments
        ),
        f"the offset map of link {new_id}",
    )
    return store.create_link(
        new_id, old.source, old.target, include=patterns, reverse_of=old.reverse_of, actor=actor,
        reason=f"{reason}: split from {link_id}",
    )  # fmt: skip


def undo_split(
    store: RoutingStore, link_id: str, new_id: str, topics: list[str], *, actor: str, reason: str
) -> bool:
    """Give ``topics`` back to link ``link_id`` when the split stopped before ``new_id`` was made (else
    the new link copies them, and stays). True when it gave them back."""
    if store.link(new_id) is not None:
        return False
    old = store.link(link_id)
    patterns = {re.escape(t) for t in topics}
    if old is None or old.state is LinkState.PROMOTED or not patterns & set(old.exclude):
        return False
    kept = tuple(p for p in old.exclude if p not in patterns)
    change = LinkChange(
        old.id, old.epoch, old.source, old.target, old.include, kept, old.state, old.reverse_of
    )
    store.apply([change], actor=actor, reason=reason)
    return True


def _wait_let_go(
    store: RoutingStore,
    link_id: str,
    names: set[str],
    *,
    epoch: int,
    wait_s: float,
    progress: Callable[[str], None],
) -> None:
    """Until every live mirror process of the link has listed its topics under ``epoch`` or later (so
    it is subscribed without ``names``, and no assignment can give it one of them again) and holds none
    of their partitions (it reports what it holds once its group has assigned the rest)."""
    deadline = time.monotonic() + wait_s
    while True:
        holding = sorted(
            m.member
            for m in read_status(store.zk, store.layout, link_id)
            if m.listed_epoch < epoch or any(p.topic in names for p in m.partitions)
        )
        if not holding:
            return
        if time.monotonic() > deadline:
            raise BindingRefused(
                f"link {link_id}: mirror processes {', '.join(holding)} still copy "
                f"{', '.join(sorted(names)[:5])} after {wait_s:g}s, or have not taken the change of its "
                f"topics up (epoch {epoch}); the split is not made"
            )
        progress(f"waiting for {', '.join(holding)} to let {', '.join(sorted(names)[:5])} go")
        time.sleep(_POLL_S)
