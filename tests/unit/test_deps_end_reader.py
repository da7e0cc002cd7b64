"""The worker's kept log-end reader is made anew, once, when it fails: librdkafka kept one asking a broker
that had restarted, every ListOffsets failing at once (``_DESTROY_BROKER``) for four minutes, and a
switchover's drain gave up on it. A second failure, of a reader just made, is the cluster's to tell."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from activities import deps as deps_module
from activities.deps import Deps
from switchyard.config import ClusterConfig, Config
from switchyard.errors import KafkaOperationError


class Reader:
    made: ClassVar[list[Reader]] = []

    def __init__(self, _settings: dict[str, Any]) -> None:
        self.closed = False
        Reader.made.append(self)

    def close(self) -> None:
        self.closed = True


def deps() -> Deps:
    config = Config(clusters={"primary": ClusterConfig(bootstrap="127.0.0.1:9")}, default_cluster="primary")
    none: Any = None
    return Deps(config, none, none, none)


def test_a_reader_that_fails_is_made_anew_and_asked_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    Reader.made = []
    monkeypatch.setattr(deps_module, "Consumer", Reader)

    def log_ends(reader: Reader, keys: list[tuple[str, int]], **_: float) -> dict[tuple[str, int], int]:
        if reader is Reader.made[0]:
            raise KafkaOperationError("cannot list the offsets: Local: Broker handle destroyed")
        return dict.fromkeys(keys, 7)

    monkeypatch.setattr(deps_module.kafka, "log_ends", log_ends)
    kept = deps()
    assert kept.ends("primary", [("t", 0)]) == {("t", 0): 7}
    assert [r.closed for r in Reader.made] == [True, False]
    assert kept.ends("primary", [("t", 0)]) == {("t", 0): 7}  # the new one is kept
    assert len(Reader.made) == 2


def test_a_reader_made_anew_that_fails_too_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    Reader.made = []
    monkeypatch.setattr(deps_module, "Consumer", Reader)

    def log_ends(_reader: Reader, _keys: list[tuple[str, int]], **_: float) -> dict[tuple[str, int], int]:
        raise KafkaOperationError("cannot list the offsets: the cluster is down")

    monkeypatch.setattr(deps_module.kafka, "log_ends", log_ends)
    with pytest.raises(KafkaOperationError, match="the cluster is down"):
        deps().ends("primary", [("t", 0)])
    assert len(Reader.made) == 2


def test_the_kept_reader_is_given_a_few_seconds_and_a_new_one_the_whole_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kept reader whose fetches never reached a partition's end after a broker's restart read nothing
    for its whole 30 s, a drill's clients held meanwhile (31.7 s): it is given a few seconds, then made
    anew, and the new one the whole wait."""
    Reader.made = []
    monkeypatch.setattr(deps_module, "Consumer", Reader)
    given: list[float] = []

    def log_ends(reader: Reader, keys: list[tuple[str, int]], **how: float) -> dict[tuple[str, int], int]:
        given.append(how["timeout_s"])
        if reader is Reader.made[0]:
            raise KafkaOperationError("no end of partition reached for t[0] (at -1001, high watermark -1)")
        return dict.fromkeys(keys, 7)

    monkeypatch.setattr(deps_module.kafka, "log_ends", log_ends)
    assert deps().ends("primary", [("t", 0)]) == {("t", 0): 7}
    assert given == [deps_module.KEPT_READER_S, deps_module.kafka.LOG_ENDS_WAIT_S]
