"""Every length in a request is checked before kio's native decoder sees it: a length it cannot
allocate aborts the whole process (SIGABRT), which no ``except`` catches."""

from __future__ import annotations

import dataclasses
import struct
import subprocess
import sys
from typing import Any

import kio.index
import pytest
from kio.schema.index import api_key_map, schema_name_map

from switchyard.frames.bounds import BoundsError, check_entity
from switchyard.frames.protocol import FrameError, parse_request
from tests.helpers.frames import Encoded, broken, emptied, example, kio_bytes


def schemas(load: Any) -> list[tuple[str, Any]]:
    found = []
    for key, name in api_key_map.items():
        for version in schema_name_map[name]:
            try:
                found.append((f"{name} v{version}", load(key, version)))
            except kio.index.KioIndexError:
                continue
    return found


def _name(value: object) -> str:
    return value if isinstance(value, str) else ""


REQUESTS = schemas(kio.index.load_request_schema)
RESPONSES = schemas(kio.index.load_response_schema)


def test_there_is_something_to_check() -> None:
    assert len(REQUESTS) > 300  # every API kio knows, at every version
    assert len(RESPONSES) > 300


@pytest.mark.parametrize(("name", "schema"), REQUESTS + RESPONSES, ids=_name)
def test_the_check_walks_every_schema_to_its_end(name: str, schema: Any) -> None:
    """The tests' own encoder writes what kio writes, and the check ends exactly where the entity does."""
    entity = example(schema)
    written = Encoded()
    written.entity(schema, entity)
    expected = kio_bytes(schema, entity)
    assert bytes(written.out) == expected, name
    assert check_entity(schema, expected, 0) == len(expected), name


@pytest.mark.parametrize(("name", "schema"), REQUESTS, ids=_name)
def test_nulls_are_written_as_kio_writes_them_and_checked_as_the_schema_says(name: str, schema: Any) -> None:
    """Where the schema lets a field be null, the tests' encoder writes what kio writes and the check
    takes it; a null where the schema allows none is refused."""
    for what, allowed, entity in emptied(example(schema)):
        written = Encoded()
        written.entity(schema, entity)
        if allowed:
            assert bytes(written.out) == kio_bytes(schema, entity), f"{name} {what}"
            assert check_entity(schema, bytes(written.out), 0) == len(written.out), f"{name} {what}"
        else:  # a null array, or a null string (refused before: "length -1")
            with pytest.raises(BoundsError, match=r"null array at|length -1 at"):
                check_entity(schema, bytes(written.out), 0)


def test_a_response_s_arrays_may_be_null_as_kio_reads_them() -> None:
    schema = kio.index.load_response_schema(3, 12)  # Metadata: brokers and topics are never null
    written = Encoded()
    written.entity(schema, dataclasses.replace(example(schema), topics=None))
    with pytest.raises(BoundsError, match="null array at"):
        check_entity(schema, bytes(written.out), 0)
    assert check_entity(schema, bytes(written.out), 0, any_null_array=True) == len(written.out)


@pytest.mark.parametrize(("name", "schema"), REQUESTS, ids=_name)
def test_every_request_parses_to_what_was_sent(name: str, schema: Any) -> None:
    entity = example(schema)
    request = parse_request(Encoded().request(schema, entity, correlation_id=99, client_id="app@host"))
    assert (request.api_key, request.api_version, request.correlation_id) == (
        schema.__api_key__,
        schema.__version__,
        99,
    )
    assert request.client_id == "app@host"
    assert request.body == entity, name


@pytest.mark.parametrize(("name", "schema"), REQUESTS, ids=_name)
def test_every_broken_length_is_refused(name: str, schema: Any) -> None:
    """Each length field of the header and body, in turn: largest, negative, one past the end."""
    encoded = Encoded()
    frame = encoded.request(schema, example(schema))
    tried, accepted = 0, []
    for what, bad in broken(frame, encoded.lengths):
        tried += 1
        try:
            parse_request(bad)
        except FrameError:
            continue
        accepted.append(what)
    assert accepted == [], name
    assert tried >= 3  # at least the client id's three


def test_mutations_at_every_offset_never_abort_the_decoder() -> None:
    """Every request schema's example, cut at every offset and overwritten at every offset with huge,
    negative and zero lengths; what the check lets through goes to kio. In a child process: an
    abort there is a failure here, not the end of the test run."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.frames"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    tried, passed = map(int, done.stdout.split())
    assert tried > 150_000
    assert 0 < passed < tried  # some mutations are still well-formed; many are refused


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (3, 12, b"\xff\xff\xff\xff\x0f"),  # Metadata: topics
        (0, 9, b"\x00\x01\x00\x00\x00\x01\xff\xff\xff\xff\x0f"),  # Produce: no txn id, acks, timeout, topics
        (23, 4, b"\xff\xff\xff\xff\xff\xff\xff\xff\x0f"),  # OffsetForLeaderEpoch: replica id, topics
        (10, 6, b"\x00\xff\xff\xff\xff\x0f"),  # FindCoordinator: key type, keys
        (2, 10, b"\xff\xff\xff\xff\x00\xff\xff\xff\xff\x0f"),  # ListOffsets: replica, isolation, topics
    ],
)
def test_the_frames_that_aborted_the_gateway_are_refused(api_key: int, version: int, body: bytes) -> None:
    frame = struct.pack(">hhih", api_key, version, 1, 1) + b"x" + b"\x00" + body
    with pytest.raises(FrameError, match="cannot fit"):
        parse_request(frame)
