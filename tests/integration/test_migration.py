"""A topic migration end to end: one producing and two consuming applications through the gateway, found
from the gateway's reports, moved with the topic while they run — and what each of them saw."""

from __future__ import annotations

from collections import Counter

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.groups import committed_offsets
from switchyard.mirror.status import read_status
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import migration_id, migration_link
from switchyard.traffic import Traffic
from tests.helpers.live import Live, capture, unique, wait_for_approval
from tests.helpers.migrations import seen_by_gateway
from tests.helpers.traffic import judge_consumer, topic_ids

PARTITIONS = 3
PROCESS_S = 0.25
"""How long each consuming application works on a batch before committing it: busy most of the time, it
is still working when clients are blocked, so its next commit is held over the flip and must be carried
to the standby (an application that is mostly idle commits nothing then, and the carry goes untested)."""
SESSION_S = 15.0
"""A held commit waits a third of its member's session time-out: 5 s here, well past how long clients are
blocked (about 1.3 s), so a correct gateway carries every commit even on a slow machine."""


def test_a_topic_moves_with_its_producer_and_both_consumers_and_the_source_copy_is_retired(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    assert live.gateway is not None
    primary = stack_config.clusters["primary"].bootstrap
    standby = stack_config.clusters["standby"].bootstrap
    topic, shop, billing, audit = unique("orders"), unique("shop"), unique("billing"), unique("audit")
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)
    groups = {billing: unique("billing-group"), audit: unique("audit-group")}
    traffic = Traffic(
        live.gateway.bootstrap,
        shop,
        topic,
        "",
        idempotent=True,
        readers=groups,
        process_s=PROCESS_S,
        session_s=SESSION_S,
    )
    traffic.start()
    saga = migration_id(topic)
    migration = None
    try:
        traffic.wait_for(300)
        seen_by_gateway(routing, topic, {shop, billing, audit}, set(groups.items()))
        dry = live.cli("migrate-topic", topic, "--to", "standby", "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        keys = sorted(
            [
                f"{shop}#{topic}",
                f"{billing}#{topic}",
                f"{audit}#{topic}",
                *(f"{a}##{g}" for a, g in groups.items()),
            ]
        )
        assert f"keys that move: {', '.join(keys)}" in dry.stdout

        migration = live.cli_in_background("migrate-topic", topic, "--to", "standby", "--wait")
        wait_for_approval(live, saga, timeout_s=180)  # clients moved; the source copy waits for a decision
        for key in keys:
            assert routing.binding(BindingKey.parse(key)).cluster == "standby", key  # type: ignore[union-attr]
        traffic.wait_for(300)  # going on, on the standby
        approved = live.cli("sagas", "approve", saga, "--reason", "nobody left on the primary")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        out, err = migration.communicate(timeout=180)
        assert migration.returncode == 0, out + err
        traffic.wait_for(200)
    finally:
        if migration is not None and migration.poll() is None:
            migration.kill()
        traffic.stop()

    assert f"topic-migration migrated: {', '.join(keys)}" in out
    assert f"{topic} deleted on primary" in out
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))  # every send acknowledged
    there = Counter(topic_ids(standby, topic))
    assert set(there) == set(traffic.acked)  # nothing lost...
    assert max(there.values()) == 1, "records written twice"  # ...nothing written twice
    # the migration's own link copies the topic into the standby and the source stays active, so the
    # gateway carries each member's commits over: no commit refused, nothing processed twice
    print(f"\ntopic migration: {judge_consumer(traffic, carried=True)}")
    ends = kafka.ends_of(standby, [(topic, p) for p in range(PARTITIONS)])
    admin = ClusterAdmin(standby)
    for group in groups.values():  # each group resumes exactly at the next record, on the standby
        assert {k: v for k, v in committed_offsets(admin, group).items() if k[0] == topic} == ends
    assert_retired(routing, primary, topic)
    runs = routing.ledger.saga_runs(saga)
    assert [(r.kind, r.outcome) for r in runs] == [("topic-migration", "migrated")]
    steps = {s.step for s in routing.ledger.saga_steps(runs[0].run_id)}
    assert {"topic_users", "prepare_migration", "flip_keys", "retire_topic"} <= steps
    capture(live, saga, runs[0].run_id, "topic-migration-live")


def assert_retired(routing: RoutingStore, primary: str, topic: str) -> None:
    """The topic is gone from the primary, and so are both links (and their reports)."""
    assert not kafka.partitions(primary, lambda name: name == topic), "the source copy was not retired"
    link = migration_link(topic, "standby")
    for gone in (link, f"{link}-back"):
        assert routing.link(gone) is None
        assert read_status(routing.zk, routing.layout, gone) == []
