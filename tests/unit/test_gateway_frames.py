"""Whatever bytes arrive, the frame reader and parsers answer with a value or FrameError, nothing else:
a FrameError closes one connection, anything else would be a crash."""

from __future__ import annotations

import contextlib
import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from switchyard.frames.protocol import FrameError, FrameSplitter, parse_request
from workers.gateway.routing import apis
from workers.gateway.routing.apis import context_of

KNOWN = sorted(
    apis.BLOCKABLE | {apis.METADATA, apis.FIND_COORDINATOR, apis.API_VERSIONS, apis.INIT_PRODUCER_ID}
)


def frames_from(data: bytes, max_bytes: int = 4096, cuts: list[int] | None = None) -> list[bytes]:
    """The frames of a stream holding ``data`` and then ending, ``data`` arriving in pieces cut at
    ``cuts``."""
    splitter = FrameSplitter(max_bytes)
    bounds = [0, *sorted(c for c in cuts or [] if 0 < c < len(data)), len(data)]
    found = [f for lo, hi in itertools.pairwise(bounds) for f in splitter.feed(data[lo:hi])]
    if (cut := splitter.cut()) is not None:
        raise FrameError(cut)
    return found


@given(st.binary(max_size=300))
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_the_frame_reader_never_fails_otherwise(data: bytes) -> None:
    try:
        frames = frames_from(data)
    except FrameError:
        return
    assert sum(4 + len(f) for f in frames) == len(data)


@given(
    st.lists(st.binary(min_size=FrameSplitter.MIN_BYTES, max_size=300), max_size=8),
    st.lists(st.integers(0, 2500), max_size=12),
)
@settings(max_examples=500)
def test_frames_come_out_whole_and_in_order_however_the_stream_is_cut(
    frames: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    assert frames_from(stream, cuts=cuts) == frames


@given(st.binary(max_size=200))
@settings(max_examples=1000)
def test_the_header_parser_never_fails_otherwise(data: bytes) -> None:
    with contextlib.suppress(FrameError):
        parse_request(data)


@given(
    st.sampled_from(KNOWN),
    st.integers(0, 14),
    st.integers(-(2**31), 2**31 - 1),
    st.binary(max_size=120),
)
@settings(max_examples=2000)
def test_body_decoding_never_fails_otherwise(
    api_key: int, version: int, correlation: int, rest: bytes
) -> None:
    frame = struct.pack(">hhi", api_key, version, correlation) + rest
    with contextlib.suppress(FrameError):
        context_of(parse_request(frame))


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (struct.pack(">i", 3) + b"abc", "frame size 3 outside"),
        (struct.pack(">i", 5000), "frame size 5000 outside"),
        (struct.pack(">i", 20) + b"short", "after 5 of 20 frame bytes"),
        (b"\x00\x00", "inside a frame size"),
    ],
)
def test_frame_errors_say_what_is_wrong(data: bytes, problem: str) -> None:
    with pytest.raises(FrameError, match=problem):
        frames_from(data)


def test_a_frame_round_trip() -> None:
    body = struct.pack(">hhih", 18, 0, 7, 1) + b"x"
    (frame,) = frames_from(struct.pack(">i", len(body)) + body)
    request = parse_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (
        18,
        0,
        7,
        "x",
    )
