"""A switch never breaks an application it does not move: on the embedded stack, with the gateway, mirror
and worker processes, clients writing through the gateway and the CLI as an operator runs it.

A key nobody knows is refused; who used which topics survives a gateway's restart and hours of idleness;
a link shared by applications with disjoint topics is split so that a switch promotes only its keys'
topics; a topic written by an application that stays is refused, naming it."""

from __future__ import annotations

import subprocess
import time
import uuid
from dataclasses import replace

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.model import LinkState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sharing import split_id
from switchyard.traffic import Traffic
from switchyard.usage import decode, encode, read_usage
from tests.helpers.live import Live, unique
from tests.helpers.mirrors import records
from tests.helpers.traffic import judge_consumer, judge_sends

ACTOR = "user:test"
WEEK_S = 7 * 24 * 3600.0


def shared_link(
    routing: RoutingStore, config: Config, apps: list[str], *, partitions: int = 1
) -> tuple[str, dict[str, str]]:
    """Each application bound to the primary with a topic of its own, all copied by one link that
    matches them by pattern (``sag-<run>-.*``), the mirror following it; (link, topic of each app)."""
    run = uuid.uuid4().hex[:6]
    topics = {app: f"sag-{run}-{i}" for i, app in enumerate(apps)}
    kafka.create_topics(config.clusters["primary"].bootstrap, list(topics.values()), partitions=partitions)
    link = unique("shared")
    routing.create_link(link, "primary", "standby", include=[f"sag-{run}-.*"], actor=ACTOR, reason="test")
    epoch = 0
    for app in apps:
        epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    wait_followed(routing, link, len(apps) * partitions)
    return link, topics


def wait_followed(routing: RoutingStore, link: str, partitions: int) -> None:
    deadline = time.monotonic() + 60
    while (
        len(
            {
                (p.topic, p.partition)
                for m in read_status(routing.zk, routing.layout, link)
                for p in m.partitions
            }
        )
        < partitions
    ):
        assert time.monotonic() < deadline, f"the mirror never took up {link}"
        time.sleep(0.2)


def write(live: Live, app: str, topic: str, count: int = 10) -> None:
    """``count`` records from ``app`` through the gateway, each acknowledged."""
    assert live.gateway is not None
    settings = {"client.id": f"{app}@w"}
    assert kafka.produce(live.gateway.bootstrap, topic, records(count), settings=settings) == count


def wait_seen(routing: RoutingStore, pairs: dict[str, str]) -> None:
    """Until the gateways' report shows each application writing its topic."""
    deadline = time.monotonic() + 30
    while True:
        seen = {(u.app, u.topic) for u in read_usage(routing.zk, routing.layout, within_s=WEEK_S)}
        if set(pairs.items()) <= seen:
            return
        assert time.monotonic() < deadline, f"the gateway never reported {pairs}"
        time.sleep(0.3)


def restart_gateway(live: Live) -> None:
    assert live.gateway is not None
    live.gateway.stop()
    live.gateway.start()


def said(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout + run.stderr


def test_a_typo_is_refused_and_nothing_changes_though_the_applications_are_idle_and_their_gateway_restarted(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The issue's scenario: three applications share a link and wrote through a gateway that has
    restarted since; none writes now. A switch of a key nobody ever used must not promote their link."""
    apps = [unique("sag-app") for _ in range(3)]
    link, topics = shared_link(routing, stack_config, apps)
    for app in apps:
        write(live, app, topics[app])
    wait_seen(routing, topics)
    restart_gateway(live)
    before = routing.snapshot().epoch

    words = "nosuchapp: no binding names it and no gateway saw its clients within 604800s"
    dry = live.cli("switchover", "nosuchapp", "--link", link, "--dry-run")
    assert dry.returncode == 5, said(dry)
    assert f"refused: {words}" in dry.stdout
    run = live.cli("switchover", "nosuchapp", "--link", link, "--wait", "--reason", "a typo")
    assert run.returncode != 0, said(run)
    assert words in said(run)

    snapshot = routing.snapshot()
    assert snapshot.epoch == before
    assert snapshot.links[link].state is LinkState.RUNNING
    assert BindingKey.for_app("nosuchapp") not in snapshot.bindings
    for app in apps:  # nothing refused: their topics are still theirs on the primary
        write(live, app, topics[app])


def test_an_application_seen_an_hour_ago_and_one_whose_gateway_restarted_still_use_their_topics(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """``idle`` last wrote an hour ago (the gateway's report aged by an hour while it was down), and
    ``quiet`` wrote before the gateway restarted: both still count, so switching ``mover`` splits the
    link they share rather than promoting their topics with it."""
    assert live.gateway is not None
    idle, quiet, mover = (unique(name) for name in ("idle", "quiet", "mover"))
    link, topics = shared_link(routing, stack_config, [idle, quiet, mover])
    for app in (idle, quiet, mover):
        write(live, app, topics[app])
    wait_seen(routing, topics)

    live.gateway.stop()
    try:
        node = routing.layout.usage(live.gateway.id)
        data, _ = routing.zk.get(node)  # kept while the gateway is down
        aged = [u if u.app != idle else replace(u, last_seen=u.last_seen - 3600) for u in decode(data)]
        routing.zk.set(node, encode(aged))
    finally:
        live.gateway.start()
    time.sleep(3)  # past a publication (every 2 s): the restarted gateway's own report, recalled

    seen = {
        u.app: u
        for u in read_usage(routing.zk, routing.layout, within_s=WEEK_S)
        if u.topic in topics.values()
    }
    assert {idle, quiet, mover} <= set(seen)
    assert 3500 < time.time() - seen[idle].last_seen < 3700
    shown = live.cli("usage", "--app", idle)
    assert shown.returncode == 0, said(shown)
    assert topics[idle] in shown.stdout
    assert "1h ago" in shown.stdout

    dry = live.cli("switchover", mover, "--link", link, "--dry-run")
    assert dry.returncode == 0, said(dry)
    new_link = split_id(routing.snapshot().links[link], [topics[mover]])
    assert f"link {link} is split first: {topics[mover]} move to {new_link}" in dry.stdout


def test_two_applications_with_disjoint_topics_on_one_link_are_switched_one_at_a_time_and_back(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """``shop`` is switched over while ``audit`` keeps writing on the primary: the link is split, shop's
    topic promoted alone, audit's still copied. Then shop comes back, and audit goes over and back."""
    assert live.gateway is not None
    shop, audit = unique("shop"), unique("audit")
    link, topics = shared_link(routing, stack_config, [shop, audit], partitions=2)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    traffic = {
        app: Traffic(
            live.gateway.bootstrap, app, topics[app], unique("group"), idempotent=True, rate_per_s=200
        )
        for app in (shop, audit)
    }
    for t in traffic.values():
        t.start()
    try:
        for t in traffic.values():
            t.wait_for(100)
        over = live.cli("switchover", shop, "--link", link, "--wait", "--reason", "shop alone")
        assert over.returncode == 0, said(over)
        snapshot = routing.snapshot()
        split = snapshot.links[split_id(snapshot.links[link], [topics[shop]])]
        assert split.state is LinkState.PROMOTED
        assert snapshot.links[link].state is LinkState.RUNNING
        assert not snapshot.links[link].copies(topics[shop])
        assert snapshot.links[link].copies(topics[audit])
        assert (
            snapshot.bindings[BindingKey.for_app(shop)].cluster,
            snapshot.bindings[BindingKey.for_app(audit)].cluster,
        ) == ("standby", "primary")
        for t in traffic.values():
            t.wait_for(200)
        assert traffic[audit].failed == []  # never refused on the primary
        copied_up(primary, standby, topics[audit], 2)  # and its copy still current

        back = live.cli("switchback", shop, "--wait", "--reason", "shop back")
        assert back.returncode == 0, said(back)
        # audit over and back, along what is left of the link
        over = live.cli("switchover", audit, "--link", link, "--wait", "--reason", "audit alone")
        assert over.returncode == 0, said(over)
        assert "split" not in over.stdout
        traffic[audit].wait_for(200)
        back = live.cli("switchback", audit, "--wait", "--reason", "audit back")
        assert back.returncode == 0, said(back)
        for t in traffic.values():
            t.wait_for(200)
    finally:
        for t in traffic.values():
            t.stop()
    for t in traffic.values():
        judge_sends(t, primary)
        print(f"\n{t.topic}: {judge_consumer(t, carried=True)}")


def copied_up(source: str, target: str, topic: str, partitions: int) -> None:
    """Until the target's copy holds everything the source held when asked (it is being written on)."""
    keys = [(topic, p) for p in range(partitions)]
    wanted = kafka.ends_of(source, keys)
    deadline = time.monotonic() + 30
    while any(end < wanted[k] for k, end in kafka.ends_of(target, keys).items()):
        assert time.monotonic() < deadline, f"{topic}'s copy fell behind the source's {wanted}"
        time.sleep(0.2)


def test_two_applications_writing_one_topic_cannot_be_switched_apart(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """Switching one would promote the topic under the other's writes: refused, naming it, in the dry
    run and in the saga alike, and nothing changes."""
    first, second = unique("writer"), unique("writer")
    link, topics = shared_link(routing, stack_config, [first])
    topic = topics[first]
    routing.set_binding(BindingKey.for_app(second), "primary", actor=ACTOR, reason="test")
    write(live, first, topic)
    write(live, second, topic)
    wait_seen(routing, {first: topic, second: topic})
    before = routing.snapshot().epoch

    words = (
        f"{topic} is written by {second}@w on primary, which would stay there: promoting it makes "
        f"primary's copy the reverse link's alone, and those writes would be refused. Switch them "
        f"together: {first} {second}"
    )
    dry = live.cli("switchover", first, "--link", link, "--dry-run")
    assert dry.returncode == 5, said(dry)
    assert f"refused: {words}" in dry.stdout
    run = live.cli("switchover", first, "--link", link, "--wait", "--reason", "apart")
    assert run.returncode != 0, said(run)
    assert words in said(run)
    assert routing.snapshot().epoch == before
    write(live, second, topic)
