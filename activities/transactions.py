"""The saga step that lets transactions open on the source end before the copy is fenced and drained.

The mirror reads committed records only, so it stops at a partition's last stable offset: the first
offset of the earliest transaction still open there. Records behind that offset — any producer's,
acknowledged — reach the target only once the transaction ends, with a commit or abort marker that moves
the source's end after the block. A switch that went on regardless would either wait out its drain
(nothing below the marker-less end can be copied) or see the marker and take it for a writer around the
gateway. So, after the block and before the fence, the step waits until no partition being switched
has a transaction open, and abandons the switch, naming each, when one stays open past the bound.
"""

from __future__ import annotations

import time

from activities.deps import Deps
from activities.pulse import beat
from activities.recorded import step
from switchyard import kafka
from switchyard.errors import TransactionsOpen
from switchyard.sagas import steps
from switchyard.sagas.steps import Settled, SettleRequest

_POLL_S = 0.1


class TransactionActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @step(steps.SETTLE, held=True)
    def settle_transactions(self, request: SettleRequest) -> Settled:
        """Wait until no transaction is open on the partitions on the link's source (see the module)."""
        link = self.deps.link(request.link)
        keys = [(p.topic, p.partition) for p in request.partitions]
        started = time.monotonic()
        seen: set[tuple[str, int]] = set()
        while True:
            still = self.deps.admins.retried(
                (link.source,), lambda clients, timeout_s: kafka.open_transactions(clients[0], keys,
                                                                                   timeout_s=timeout_s),
            )  # fmt: skip
            waited = time.monotonic() - started
            if not still:
                return Settled(round(waited, 3), [f"{t}[{p}]" for t, p in sorted(seen)])
            seen |= set(still)
            named = [
                f"{t}[{p}]: a transaction open since offset {stable} ({end - stable} offsets behind it)"
                for (t, p), (stable, end) in still.items()
            ]
            if waited > request.timeout_s:
                raise TransactionsOpen(
                    f"{'; '.join(named[:10])}{'; ...' if len(named) > 10 else ''} on {link.source}, still "
                    f"open after {request.timeout_s:g}s (sagas.transaction_wait_s). The mirror copies "
                    "committed records only, so nothing behind an open transaction can be copied before "
                    "it ends; end it (or find its producer: kafka-transactions.sh find-hanging), or "
                    "switch when it has"
                )
            beat({"open transactions": len(still), "waited_s": round(waited, 1), "first": named[:5]})
            time.sleep(_POLL_S)
