"""Promoting and reversing links: the two changes that need more than a state write.

Promotion stores each partition's final position — how far the source was copied, and the target's
end at that moment — next to the offset map, so the lost window and the reverse link start from facts,
not from a target that clients have written to since. It pauses the link first and waits for the
mirror to stand still, so the target's ends are stable while they are read; with no mirror running
(an unplanned failover), they are stable already.

Reversing a promoted link: copy back from the promoted side, offsets aligned the same exact way.

After a switchover the old target is where clients write; the reverse link copies those new records
back to the old source so that a switch back finds them there. Its offset map is the old map turned
around, so every record both clusters hold keeps one offset pair, and new records continue it.

The old source may hold records the old link never copied — written after the last copy, the lost
window of an unplanned failover. They stay where they are (the reconciliation job reads them) and
are not part of the reverse copy; the reverse map starts its new records after them. Because that
means records only one side has, it is refused unless forced.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import BindingRefused
from switchyard.mirror.mapstore import end_record, forget_link, read_link, segment_record, store_records
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.status import still_copying
from switchyard.model import Link, LinkState
from switchyard.routing import LinkChange, RoutingStore

Key = tuple[str, int]


@dataclass(frozen=True)
class ReverseReport:
    link_id: str
    epoch: int
    partitions: int
    uncopied: dict[Key, int] = field(default_factory=dict)
    """Records on the old source the old link never copied, per partition (left in place)."""


def promote_link(
    config: Config, store: RoutingStore, link_id: str, *, actor: str, reason: str, wait_s: float = 30.0
) -> int:
    """Pause, store the final positions, promote; return the promotion's epoch."""
    link = store.link(link_id)
    if link is None:
        raise BindingRefused(f"link {link_id!r} does not exist")
    if link.state is LinkState.PROMOTED:
        raise BindingRefused(f"link {link_id} is already promoted")
    if link.state is LinkState.RUNNING:
        store.set_link_state(link_id, LinkState.PAUSED, actor=actor, reason=f"{reason} (pausing to promote)")
    _wait_paused(store, link_id, wait_s)
    paused = store.link(link_id)
    assert paused is not None
    record_final_positions(config, paused)
    return store.set_link_state(link_id, LinkState.PROMOTED, actor=actor, reason=reason)


def record_final_positions(config: Config, link: Link) -> dict[Key, tuple[int, int]]:
    """Each copied partition's (source position copied up to, target end), stored with the map."""
    target = config.clusters[link.target].bootstrap
    maps = read_link(target, link.id).maps
    ends = kafka.ends_of(target, kafka.partitions(target, link.copies))
    final = {key: (maps.get(key, OffsetMap()).next_source(end), end) for key, end in ends.items()}
    store_records(
        target, (end_record(link.id, t, p, copied_to, end) for (t, p), (copied_to, end) in final.items()),
        f"final positions of link {link.id}",
    )  # fmt: skip
    return final


def _wait_paused(store: RoutingStore, link_id: str, wait_s: float) -> None:
    """Until every live mirror process reports the link's partitions paused (none running: at once)."""
    deadline = time.monotonic() + wait_s
    while True:
        copying = still_copying(store.zk, store.layout, link_id)
        if not copying:
            return
        if time.monotonic() > deadline:
            raise BindingRefused(f"link {link_id}: still copying {', '.join(copying[:5])}; not promoted")
        time.sleep(0.2)


def delete_link(
    config: Config, store: RoutingStore, link_id: str, *, actor: str, reason: str, force: bool = False
) -> tuple[int, int]:
    """Remove a link (fenced, in the ledger), then its offset map on the target; return the epoch and
    how many map records were removed.

    Refused unless forced: a running link (its target would become writable by clients halfway through
    a copy), and a link another reverses (the offsets clients see through the reverse link, on its
    target, are presented through this one's map: :mod:`switchyard.mirror.presented`; without it they
    would no longer be translated, and a consumer would skip or re-read records). Mirror processes stop
    copying it when they see the new epoch.
    """
    link = store.link(link_id)
    if link is None:
        raise BindingRefused(f"link {link_id!r} does not exist")
    if link.state is LinkState.RUNNING and link.problem is None and not force:
        raise BindingRefused(
            f"link {link_id} is running: pause it first (its target then stays as copied), or force it"
        )
    reversing = sorted(other.id for other in store.snapshot().links.values() if other.reverse_of == link_id)
    if reversing and not force:
        raise BindingRefused(
            f"link {link_id} is reversed by {', '.join(reversing)}: clients there see offsets presented "
            "through its map; delete that first, or force it"
        )
    epoch = store.apply([LinkChange.of(link, LinkState.DELETED)], actor=actor, reason=reason)
    removed = forget_link(config.clusters[link.target].bootstrap, link_id)
    return epoch, removed


def reverse_maps(
    ends: dict[Key, tuple[int, int]], maps: dict[Key, OffsetMap], old_source_ends: dict[Key, int]
) -> tuple[dict[Key, OffsetMap], dict[Key, int]]:
    """The reverse link's maps, and the records on the old source beyond the copy, per partition."""
    reversed_maps, uncopied = {}, {}
    for key, (copied_to, target_end) in ends.items():
        # segments past the target's end describe nothing there (a copy cut off between storing a batch's
        # segments and writing its records, which no take-up removed before a failover)
        forward = OffsetMap(list(maps.get(key, OffsetMap()).segments))
        forward.drop_after(target_end)
        inverse = forward.inverse()
        old_end = old_source_ends[key]
        if old_end < copied_to:
            raise BindingRefused(
                f"{key[0]}[{key[1]}]: the old source ends at {old_end}, before what was copied from it "
                f"({copied_to}): its log was truncated or replaced; reversing would misalign offsets"
            )
        if old_end > copied_to:
            uncopied[key] = old_end - copied_to
        # the target's records written since the flip go after the old source's end: after records only
        # it has (a failover), or after a marker it ended on, which the copy never had
        if not inverse.continues(target_end, old_end):
            inverse.segments.append((target_end, old_end))
        reversed_maps[key] = inverse
    return reversed_maps, uncopied


def reverse_link(
    config: Config,
    store: RoutingStore,
    link_id: str,
    new_id: str,
    *,
    actor: str,
    reason: str,
    force: bool = False,
) -> ReverseReport:
    old = store.link(link_id)
    if old is None:
        raise BindingRefused(f"link {link_id!r} does not exist")
    if old.state is not LinkState.PROMOTED:
        raise BindingRefused(f"link {link_id} is {old.state}: promote it before reversing it")
    old_source = config.clusters[old.source].bootstrap
    old_target = config.clusters[old.target].bootstrap
    stored = read_link(old_target, link_id)
    copied = kafka.partitions(old_target, old.copies)
    missing = sorted(set(copied) - set(stored.ends))
    if missing:
        names = ", ".join(f"{t}[{p}]" for t, p in missing[:10])
        raise BindingRefused(
            f"link {link_id}: no final position stored for {names} (promote with `switchyard links promote`)"
        )
    # only what this link copies: another deployment's link of the same id (ids are unique per
    # ZooKeeper root) may have stored positions for its own topics in the cluster's map topic
    ends = {key: stored.ends[key] for key in copied}
    old_source_ends = kafka.ends_of(old_source, ends)
    maps, uncopied = reverse_maps(ends, stored.maps, old_source_ends)
    # transaction markers written on the old source after the flip (a transaction the switch's fence of
    # its producer aborted there, on transaction version 1) are no records a client wrote: nothing lost
    uncopied = {
        key: n for key, n in uncopied.items()
        if kafka.data_between(old_source, {key: (ends[key][0], old_source_ends[key])})
    }  # fmt: skip
    if uncopied and not force:
        total = sum(uncopied.values())
        named = ", ".join(
            f"{t}[{p}] {n} (copied up to {ends[(t, p)][0]}, it ends at {old_source_ends[(t, p)]})"
            for (t, p), n in sorted(uncopied.items())[:10]
        )
        raise BindingRefused(
            f"the old source holds {total} records the link never copied (the lost window, in "
            f"{len(uncopied)} partitions: {named}): reconcile them first, or force the reverse to leave "
            "them in place"
        )
    store_records(
        old_source,
        (segment_record(new_id, t, p, s, tt) for (t, p), m in maps.items() for s, tt in m.segments),
        f"the offset map of link {new_id}",
    )
    epoch = store.create_link(
        new_id, old.target, old.source, include=old.include, exclude=old.exclude, reverse_of=link_id,
        actor=actor, reason=reason,
    )  # fmt: skip
    return ReverseReport(new_id, epoch, len(maps), uncopied)
