"""`make demo`: a live switchover and switchback of a running application, and what it saw.

The embedded stack comes up with a gateway, a mirror and a worker. An application of the demo's own (a
new AppID and topic each run, so reruns never meet an earlier one) produces and consumes through the
gateway while a switchover saga moves it to the standby and a switchback brings it home. The report
counts every record: acknowledged to the producer, held by the cluster (each exactly once), processed
by the consumer group — and fails if the application lost, or processed twice, a single record.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from switchyard import kafka, launch
from switchyard.config import Config
from switchyard.drills.canary_link import delete_links, make_own_link
from switchyard.errors import BindingRefused, SwitchyardError
from switchyard.routing import open_store
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Kind, SwitchRequest
from switchyard.stack import Stack
from switchyard.stack.deployment import Deployment
from switchyard.traffic import Account, Traffic, account

Say = Callable[[str], None]
ACTOR = "user:demo"
PARTITIONS = 3


class DemoFailed(SwitchyardError):
    """The demo's application lost, or got twice, a record it should not have."""

    exit_code = 9


@dataclass
class Report:
    app: str
    topic: str
    sagas: list[dict[str, Any]] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    pauses_s: list[float] = field(default_factory=list)
    """The longest the producer waited for an acknowledgement during each saga."""
    sent: int = 0
    acked: int = 0
    failed: int = 0
    held: Counter[int] = field(default_factory=Counter)
    """Each record on the primary at the end, by value: how many times it is there."""
    consumer: Account | None = None

    @property
    def lost(self) -> int:
        return self.acked - len(self.held)

    @property
    def written_twice(self) -> int:
        return sum(1 for times in self.held.values() if times > 1)


def run(config: Config, *, rate_per_s: float = 500.0, say: Say = print) -> Report:
    logging.getLogger("switchyard.routing").setLevel(logging.WARNING)  # the demo says what it changes
    say("== the embedded stack")
    Stack(config).up(progress=lambda line: say(f"   {line}"))
    say("== Switchyard: a gateway, a mirror, a worker")
    deployment = Deployment(config)
    deployment.up(progress=lambda line: say(f"   {line}"))
    tag = uuid.uuid4().hex[:6]
    report = Report(app=f"demo-shop-{tag}", topic=f"demo-orders-{tag}")
    with open_store(config) as store:
        _prepare(config, store, report, say)
    group = f"{report.app}-readers"
    traffic = Traffic(
        deployment.gateway, report.app, report.topic, group, idempotent=True, rate_per_s=rate_per_s
    )
    say(
        f"== {report.app} through the gateway {deployment.gateway}: an idempotent producer, about "
        f"{rate_per_s:g} records/s to {report.topic}, and consumer group {group} processing and committing"
    )
    traffic.start()
    try:
        traffic.wait_for(int(rate_per_s * 2))
        for kind in (Kind.SWITCHOVER, Kind.SWITCHBACK):
            _switch(config, traffic, report, kind, say)
            traffic.wait_for(int(rate_per_s * 3))
    finally:
        traffic.stop()
    report.sent, report.acked, report.failed = traffic.sent, len(set(traffic.acked)), len(traffic.failed)
    report.consumer = account(traffic.readers[0], traffic.acked)
    records = kafka.read_partitions(config.clusters["primary"].bootstrap, report.topic)
    report.held = Counter(int(r.value or b"-1") for rs in records.values() for r in rs)
    _report(config, report, say)
    with open_store(config) as store:
        _tidy(config, store, report, say)
    return report


def _tidy(config: Config, store: RoutingStore, report: Report, say: Say) -> None:
    """Delete the links the demo made: left behind, a later switch of another application out of the
    primary would find several links leaving it. Its topic stays, to look at."""
    links = [report.app, *(s["reverse_link"] for s in report.sagas if s.get("reverse_link"))]
    gone = delete_links(config, store, links, actor=ACTOR, reason="demo: tidy up")
    say(f"== tidied up: links {', '.join(gone)} deleted; {report.topic} stays on both clusters")


def _prepare(config: Config, store: RoutingStore, report: Report, say: Say) -> None:
    """The demo's clusters registered, its topic on the primary, a link copying exactly that topic to the
    standby (so its switch moves nobody else), the application bound to the primary."""
    for cluster_id, cluster in config.clusters.items():
        if store.cluster(cluster_id) is None:
            store.register_cluster(cluster_id, cluster.bootstrap, actor=ACTOR, reason="demo")
    try:
        make_own_link(
            config, store, app=report.app, topic=report.topic, link_id=report.app, source="primary",
            target="standby", partitions=PARTITIONS, actor=ACTOR, reason="demo",
        )  # fmt: skip
    except BindingRefused as exc:
        raise DemoFailed(str(exc)) from None
    say(f"== link {report.app} copies {report.topic} from primary to standby, offsets identical")


def _switch(config: Config, traffic: Traffic, report: Report, kind: Kind, say: Say) -> None:
    workflow_id = saga_id([report.app])
    # over along the demo's own link, back along the reverse link the switchover made
    link = report.sagas[-1]["reverse_link"] if report.sagas else report.app
    policy = launch.policy_of(config, kind)
    request = SwitchRequest([report.app], link=link, actor=ACTOR, reason="make demo", policy=policy)
    began = time.monotonic()
    run_id = asyncio.run(launch.start(config, kind, workflow_id, request))
    say(f"== {kind} saga {workflow_id}: {launch.ui_link(config, workflow_id, run_id)}")
    result = asyncio.run(launch.follow(config, workflow_id, say))
    traffic.wait_for(1)  # an acknowledgement after the switch ends the producer's wait
    pause, _ = traffic.longest_silence(began, traffic.acked_at[-1])
    say(f"   the producer's longest wait for an acknowledgement meanwhile: {pause:.2f}s")
    report.sagas.append(result)
    report.run_ids.append(run_id)
    report.pauses_s.append(pause)


def _report(config: Config, report: Report, say: Say) -> None:
    consumer = report.consumer
    assert consumer is not None
    say("== what the application saw")
    for result, pause in zip(report.sagas, report.pauses_s, strict=True):
        rto, held = result["rto_ms"] / 1000, result["pause_ms"] / 1000
        say(
            f"   {result['kind']:<10} RTO {rto:.2f}s, clients held {held:.2f}s (the producer waited "
            f"{pause:.2f}s at most), check: {result['verdict']}"
        )
    say(f"   produced {report.sent} records: {report.acked} acknowledged, {report.failed} failed")
    say(
        f"   on the primary after the switch back: {len(report.held)} records; lost {report.lost}, "
        f"written twice {report.written_twice} (every acknowledged record counted)"
    )
    in_order = "yes" if consumer.out_of_order is None else consumer.out_of_order
    say(
        f"   consumer group: processed {consumer.processed} of {report.acked}, "
        f"missed {len(consumer.missing)}, in order: {in_order}"
    )
    refused, twice = sum(consumer.commits_refused.values()), len(consumer.twice)
    if not twice:
        say("   processed twice: 0 (each commit made during a switch was carried to the new cluster)")
    elif not consumer.again_after_commit:
        say(
            f"   processed twice: {twice} records, all in the {refused} batches whose commit was refused "
            "during a switch (at-least-once: their offsets were not committed)"
        )
    else:
        say(
            f"   processed twice: {twice}, {len(consumer.again_after_commit)} of them although their "
            "commit had gone through"
        )
    for result, run_id in zip(report.sagas, report.run_ids, strict=True):
        say(f"   {result['kind']} history: {launch.ui_link(config, result['saga_id'], run_id)}")
    problems = [
        *(["records lost"] if report.lost or consumer.missing else []),
        *(["records written twice"] if report.written_twice else []),
        *(["records re-processed after a successful commit"] if consumer.again_after_commit else []),
        *(["records processed twice"] if consumer.twice and not consumer.again_after_commit else []),
        *(["sends failed"] if report.failed else []),
        *(["records out of order"] if consumer.out_of_order else []),
    ]
    if problems:
        raise DemoFailed(f"the demo application saw {', '.join(problems)}")
    say("== nothing lost, nothing written or processed twice")
