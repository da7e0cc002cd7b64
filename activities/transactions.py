"""The saga step that lets the source settle after the block, before the copy is fenced and drained.

Two kinds of record lie past what the mirror can copy right after the block, and reach it later:

- records behind an open transaction. The mirror reads committed records only, so it stops at a
  partition's last stable offset: the first offset of the earliest transaction still open there. Records
  behind it — any producer's, acknowledged — reach the target only once the transaction ends, with a
  commit or abort marker that moves the source's end after the block;
- records a leader appended that its in-sync followers have not copied yet (:mod:`switchyard.appended`):
  above the high watermark, where every reader's end is, until they are committed. Their producers'
  requests were answered, or given up, before the block; a follower killed or frozen keeps them there
  until it copies them or the cluster drops it from the in-sync set.

A switch that went on regardless would either wait out its drain or see the end move and take it for a
writer around the gateway — or, had they come in after its check, leave them behind. So, after the block
and before the fence, the step waits until no partition being switched has a transaction open or a
record uncommitted at its leader, and abandons the switch, naming each, when one stays so past the bound
(``sagas.transaction_wait_s``).
"""

from __future__ import annotations

import time

from activities.deps import Deps, Key
from activities.pulse import beat
from activities.recorded import step
from switchyard import appended, kafka
from switchyard.errors import AppendsUncommitted, TransactionsOpen
from switchyard.sagas import steps
from switchyard.sagas.steps import Settled, SettleRequest

_POLL_S = 0.1
_LEADERS_WAIT_S = 10.0


class TransactionActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.SETTLE, held=True)
    def settle_transactions(self, request: SettleRequest) -> Settled:
        """Wait until no transaction is open and no record uncommitted on the partitions on the link's
        source (see the module)."""
        link = self.deps.link(request.link)
        keys = [(p.topic, p.partition) for p in request.partitions]
        started = time.monotonic()
        seen: set[Key] = set()
        uncommitted: set[Key] = set()
        while True:
            still = self.deps.admins.retried(
                (link.source,), lambda clients, timeout_s: kafka.open_transactions(clients[0], keys,
                                                                                   timeout_s=timeout_s),
            )  # fmt: skip
            behind = {} if still else self._uncommitted(link.source, keys)
            waited = time.monotonic() - started
            if not still and not behind:
                return Settled(round(waited, 3), _names(seen), _names(uncommitted))
            seen |= set(still)
            uncommitted |= set(behind)
            named = [
                f"{t}[{p}]: a transaction open since offset {stable} ({end - stable} offsets behind it)"
                for (t, p), (stable, end) in still.items()
            ] or [
                f"{t}[{p}]: committed up to {high}, appended at its leader up to {end}"
                for (t, p), (high, end) in behind.items()
            ]
            shown = f"{'; '.join(named[:10])}{'; ...' if len(named) > 10 else ''} on {link.source}"
            if waited > request.timeout_s and still:
                raise TransactionsOpen(
                    f"{shown}, still open after {request.timeout_s:g}s (sagas.transaction_wait_s). The "
                    "mirror copies committed records only, so nothing behind an open transaction can be "
                    "copied before it ends; end it (or find its producer: kafka-transactions.sh "
                    "find-hanging), or switch when it has"
                )
            if waited > request.timeout_s:
                raise AppendsUncommitted(
                    f"{shown}, not committed after {request.timeout_s:g}s (sagas.transaction_wait_s): an "
                    "in-sync follower has not copied them, so the source's end is not known yet. See to "
                    "the cluster's followers (kafka-topics.sh --describe --under-replicated-partitions), or "
                    "switch when they have"
                )
            beat({
                "open transactions": len(still), "uncommitted": len(behind), "waited_s": round(waited, 1),
                "first": named[:5],
            })  # fmt: skip
            time.sleep(_POLL_S)

    def _uncommitted(self, cluster: str, keys: list[Key]) -> dict[Key, tuple[int, int]]:
        """The partitions whose leader's log end is past their high watermark: (high watermark, end). The
        ends are read first: a high watermark read after them that reached them holds everything they
        did."""
        ends = appended.leader_ends(self.deps.admins.get(cluster).wire, keys, _LEADERS_WAIT_S)
        highs = self.deps.ends(cluster, keys)
        return {k: (highs[k], ends[k]) for k in keys if highs[k] < ends[k]}


def _names(keys: set[Key]) -> list[str]:
    return [f"{t}[{p}]" for t, p in sorted(keys)]
