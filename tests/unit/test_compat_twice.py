"""Which records written twice an outage accounts for: a producer without idempotence sends a request
again when a connection's loss took its answer, so any send in flight during the outage may land twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.helpers.compat import App, written_twice

CUT = [(100.0, 137.0)]  # a standby broker killed, back 37 s later


def _app(tmp_path: Path, library: str, acked: dict[int, tuple[float | None, float]]) -> App:
    app = App(library, "one gateway", "app", "topic", tmp_path)
    lines = []
    for v, (sent, at) in acked.items():
        said = {} if sent is None else {"s": sent}
        lines.append(json.dumps({"k": "acked", "t": at, "v": v, "p": 0, "o": v, **said}))
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    return app


def test_a_send_in_flight_across_the_outage_is_the_outages_even_answered_after_it(tmp_path: Path) -> None:
    app = _app(tmp_path, "kafkajs", {
        1: (99.0, 101.0),  # sent before, answered within
        2: (99.9, 160.0),  # sent as the broker was killed, answered 23 s after it was back (record 57)
        3: (150.0, 150.1),  # sent past the outage and its slack: the gateway's, or the client's, doing
        4: (None, 160.0),  # its send time not said: judged by its answer alone
        5: (90.0, 99.0),  # answered before the outage
    })  # fmt: skip
    assert written_twice(app, Counter({v: 2 for v in range(1, 6)}), CUT) == [3, 4, 5]


def test_an_idempotent_producer_is_never_excused(tmp_path: Path) -> None:
    app = _app(tmp_path, "java", {1: (None, 101.0)})
    assert written_twice(app, Counter({1: 2}), CUT) == [1]
