"""The fence's verdict: did the source's ends stand still between two reads after the block?

Whatever moved them wrote around the gateway (the gateway holds every client of the blocked keys), and a
switch that went on would leave its records behind. Only transaction markers may land there meanwhile: a
blocked producer's abort, or another's transaction ending, writes nothing a client reads.
"""

from __future__ import annotations

from activities.deps import Deps, Key
from switchyard import kafka
from switchyard.errors import FenceBroken


def stood_still(deps: Deps, source: str, first: dict[Key, int]) -> dict[Key, int]:
    """The source's ends read again; FenceBroken, naming each partition, where a record moved them since
    ``first``."""
    second = deps.ends(source, list(first))
    moved = {k: (first[k], second[k]) for k in first if second[k] != first[k]}
    if moved and kafka.data_between(deps.bootstrap(source), moved) == 0:
        moved = {}  # markers only
    if moved:
        named = ", ".join(f"{t}[{p}] {a} -> {b}" for (t, p), (a, b) in sorted(moved.items()))
        raise FenceBroken(
            f"after the block, the source kept being written: {named}. Something writes to {source} "
            "without the gateway; stop it, or those records would be left behind"
        )
    return second
