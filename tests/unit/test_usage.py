"""A gateway's usage report: what it keeps, how it is written to ZooKeeper and read back."""

from __future__ import annotations

import json
import time
import uuid

from switchyard.identity import Identity
from switchyard.usage import MAX_REPORT_BYTES, PRODUCE, Use, decode, encode
from workers.gateway.process.usage import UsageTracker
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context


def use(app: str, topic: str, seen: float) -> Use:
    return Use(app, "i-1", topic, PRODUCE, None, seen)


def test_a_report_is_compressed_and_read_back_as_written() -> None:
    now = time.time()
    uses = [use(f"app-{n}", f"topic-{n % 7}", now - n) for n in range(500)]
    data = encode(uses)
    plain = json.dumps({"uses": [u.row() for u in uses]}).encode()
    assert len(data) * 5 < len(plain)  # about tenfold; the node limit is what matters
    assert sorted(decode(data), key=lambda u: u.app) == sorted(
        [Use.of(u.row()) for u in uses], key=lambda u: u.app
    )


def test_a_report_written_before_compression_is_still_read() -> None:
    row = use("orders", "payments", 1700000000.0).row()
    assert decode(json.dumps({"uses": [row]}).encode()) == [Use.of(row)]
    assert decode(b"") == []


def test_a_report_too_large_for_a_node_keeps_its_newest_sightings() -> None:
    now = time.time()
    # random names compress badly: 60,000 of them are well past the limit
    uses = [use(uuid.uuid4().hex, uuid.uuid4().hex, now - n) for n in range(60_000)]
    data = encode(uses)
    assert len(data) <= MAX_REPORT_BYTES
    kept = decode(data)
    assert 0 < len(kept) < len(uses)
    oldest_kept = min(u.last_seen for u in kept)
    dropped = {u.key for u in uses} - {u.key for u in kept}
    assert all(u.last_seen < oldest_kept for u in uses if u.key in dropped)


def test_a_restarted_gateway_recalls_what_it_reported_and_forgets_what_is_past_the_window() -> None:
    now = time.time()
    tracker = UsageTracker(retention_s=3600)
    tracker.recall([use("orders", "payments", now - 600), use("old", "audit", now - 7200)])
    tracker.recall([use("orders", "payments", now - 1200)])  # an older sighting never wins
    assert {(u.app, round(now - u.last_seen)) for u in tracker.uses()} == {("orders", 600)}


def test_a_first_sighting_and_one_aged_out_of_the_window_wake_the_publisher() -> None:
    """The report is written at once for these (a plan must know them); a sighting seen again is not."""
    tracker = UsageTracker(60.0)
    woken: list[str] = []
    tracker.on_new = lambda: woken.append("new")
    shop = Identity("shop", "i-1")
    tracker.note(shop, apis.PRODUCE, Context(topics=("orders",)))
    tracker.note(shop, apis.PRODUCE, Context(topics=("orders",)))
    assert len(woken) == 1
    tracker.note(shop, apis.FETCH, Context(topics=("orders",)))  # another role: new
    assert len(woken) == 2
    tracker.recall([Use("shop", "i-1", "receipts", PRODUCE, None, time.time() - 61)])  # reported long ago
    tracker.note(shop, apis.PRODUCE, Context(topics=("receipts",)))
    assert len(woken) == 3
    tracker.recall([Use("shop", "i-1", "refunds", PRODUCE, None, time.time() - 30)])  # within the window
    tracker.note(shop, apis.PRODUCE, Context(topics=("refunds",)))
    assert len(woken) == 3
