"""The pause a transactional producer sees at a switch, next to a plain producer's, in the same run.

One application writes through the gateway with two producers at once, each to a topic of its own: an
idempotent one at 1,000 records/s (the plain producer, read by a group) and a librdkafka transactional
one committing transactions of ten records back to back, aborting and writing again on an abortable
error. It is switched to the standby, back, and to the standby again, five times, each on a new app.
Per switch: the longest time without an acknowledgement while the saga ran (the plain producer) and
without a committed transaction (the transactional one: one abortable error at the block or after the
flip, an abort, a new producer id on the new cluster). Every committed transaction is read once on the
standby, none aborted; timings are only printed.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid

from switchyard import kafka, launch
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.sagas.requests import SwitchRequest
from switchyard.table import render
from switchyard.threads import Worker
from switchyard.traffic import Traffic
from tests.bench.test_switchover_bench import ACTOR, PARTITIONS, ROUND_TRIP, RUNS, switch
from tests.helpers.links import linked
from tests.helpers.live import Live
from tests.helpers.transactions import Transactions, read_exactly_once

RATE = 1_000


def test_the_pause_of_a_transactional_producer_next_to_a_plain_one(live: Live, routing: RoutingStore) -> None:
    assert live.gateway is not None
    config = live.effective
    rows: list[dict[str, float | str]] = []
    for _ in range(RUNS):
        app, topic, link = _prepare(routing, config)
        traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True,
                          rate_per_s=RATE)  # fmt: skip
        committer = Transactions(live.gateway.bootstrap, app, f"{topic}-txn", records=10)
        worker = Worker(committer.run, name="transactions")
        traffic.start()
        worker.start()
        try:
            traffic.wait_for(RATE)
            _committing(committer)  # its topic seen used through the gateway: the switch moves it too
            for number, kind in enumerate(ROUND_TRIP):
                request = SwitchRequest([app], link=link, actor=ACTOR, reason="bench",
                                        policy=launch.policy_of(config, kind))  # fmt: skip
                began = time.monotonic()
                result, _ = asyncio.run(switch(config, app, kind, request))
                traffic.wait_for(RATE)
                _committing(committer)
                ended = time.monotonic()
                assert result["outcome"] == "switched", result
                link = result["reverse_link"]
                rows.append({"switch": f"{number + 1} {kind.value}",
                             "plain": traffic.longest_silence(began, ended)[0],
                             "transactional": committer.longest_gap(began, ended)})  # fmt: skip
        finally:
            committer.stop.set()
            worker.join(90)
            traffic.stop()
        assert committer.fatal == [], committer.fatal
        assert traffic.failed == []
        read_exactly_once(
            config.clusters["standby"].bootstrap, f"{topic}-txn", set(committer.committed), records=10
        )
    _print(rows)


def _committing(committer: Transactions) -> None:
    """Until the committer has committed five more transactions (or failed)."""
    committed = len(committer.committed)
    while len(committer.committed) < committed + 5 and not committer.fatal:
        time.sleep(0.01)


def _prepare(routing: RoutingStore, config: Config) -> tuple[str, str, str]:
    """An app, its plain producer's topic (the transactional one's is the same name with ``-txn``), and
    a link copying both."""
    app, topic = f"bench-{uuid.uuid4().hex[:6]}", f"bench-orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic, f"{topic}-txn"], partitions=PARTITIONS)
    return app, topic, linked(routing, app, [app], [topic, f"{topic}-txn"], 2 * PARTITIONS)


def _print(rows: list[dict[str, float | str]]) -> None:
    table: list[tuple[object, ...]] = [
        (r["switch"], f"{r['plain']:.2f}", f"{r['transactional']:.2f}") for r in rows
    ]
    for number, kind in enumerate(ROUND_TRIP):
        name = f"{number + 1} {kind.value}"
        switches = [r for r in rows if r["switch"] == name]
        for statistic, pick in (("p50", statistics.median), ("max", max)):
            figures = (f"{pick(float(r[k]) for r in switches):.2f}" for k in ("plain", "transactional"))
            table.append((f"{statistic} {name}", *figures))
    print(
        f"\n\nthe longest wait per switch, {RUNS} round trips (seconds): a plain producer at {RATE:,} "
        "records/s (no acknowledgement) beside a transactional one (no committed transaction)"
    )
    print(render(("SWITCH", "PLAIN PRODUCER", "TRANSACTIONAL PRODUCER"), table))
