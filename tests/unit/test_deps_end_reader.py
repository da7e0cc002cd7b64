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

    def log_ends(reader: Reader, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
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

    def log_ends(_reader: Reader, _keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        raise KafkaOperationError("cannot list the offsets: the cluster is down")

    monkeypatch.setattr(deps_module.kafka, "log_ends", log_ends)
    with pytest.raises(KafkaOperationError, match="the cluster is down"):
        deps().ends("primary", [("t", 0)])
    assert len(Reader.made) == 2
