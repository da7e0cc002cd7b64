"""Kafka framing and headers, with kio's generated schemas doing the encoding.

A frame is a 4-byte big-endian size and that many bytes. Every request's lengths are checked against
its frame before anything decodes it (:mod:`switchyard.frames.bounds`: kio's native decoder aborts the
process on a length it cannot allocate); the header is read here, the body by kio only where routing
needs it. The original bytes are what is forwarded, so Produce records and Fetch payloads are never
re-encoded. Error handling: anything malformed raises :class:`FrameError`, which closes that one
connection.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import kio.index
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from switchyard.frames.bounds import (
    BoundsError,
    check_entity,
    check_request_header,
    check_response_header,
)
from switchyard.frames.entities import make

API_VERSIONS = 18
_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_CLIENT_ID_SIZE = struct.Struct(">h")


class FrameError(Exception):
    """The peer sent something that is not a well-formed Kafka frame for a known API version."""


@dataclass(frozen=True)
class Request:
    """A request as received: the raw frame (without its size) and what the header says."""

    frame: bytes
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int

    @cached_property
    def body(self) -> Any:
        """The request body decoded with kio: lazily (only requests routing looks into), and once."""
        try:
            body, _ = entity_reader(request_schema(self.api_key, self.api_version))(
                self.frame, self.body_offset
            )
        except Exception as exc:
            raise FrameError(f"undecodable {api_name(self.api_key)} v{self.api_version} body: {exc}") from exc
        return body


class FrameSplitter:
    """Whole frames out of a stream's chunks as they arrive, without a reader task: a broker's answer is
    handed on in the turn of the event loop that received its last bytes. Each frame's bytes are copied
    once into one buffer and once out; a frame spanning many chunks waits, unjoined, until it is whole."""

    MIN_BYTES = 4
    """An answer's correlation id, at least."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._chunks: list[bytes] = []
        self._held = 0
        self._wanted = 4
        """Bytes needed before another frame can be whole: its size, then the size and the frame."""

    def cut(self) -> str | None:
        """What an end of stream now would cut: None between frames."""
        if not self._held:
            return None
        if self._held < 4:
            return "connection closed inside a frame size"
        return f"connection closed after {self._held - 4} of {self._wanted - 4} frame bytes"

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes, in order; :class:`FrameError` for a size out of bounds."""
        self._chunks.append(data)
        self._held += len(data)
        if self._held < self._wanted:
            return []
        buffer = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        frames, at, wanted = [], 0, 4
        while len(buffer) - at >= 4:
            (size,) = _SIZE.unpack_from(buffer, at)
            if size < self.MIN_BYTES or size > self.max_bytes:
                raise FrameError(f"frame size {size} outside {self.MIN_BYTES}..{self.max_bytes}")
            end = at + 4 + size
            if end > len(buffer):
                wanted = 4 + size
                break
            frames.append(buffer[at + 4 : end])
            at = end
        rest = buffer[at:] if at else buffer
        self._chunks = [rest] if rest else []
        self._held, self._wanted = len(rest), wanted
        return frames


def parse_request(frame: bytes) -> Request:
    """The request's header, with every length of header and body checked against the frame.

    An ApiVersions request at a version this codec does not know is still a request: its header is read
    as version 1 (what follows is never decoded), so that it can be answered in the v0 form (KIP-511).
    """
    if len(frame) < 8:
        raise FrameError(f"request of {len(frame)} bytes has no header")
    api_key, api_version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame)
    try:
        if api_key == API_VERSIONS and not _known(api_key, api_version):
            body_offset = check_request_header(frame, flexible=False)
        else:
            schema = request_schema(api_key, api_version)
            body_offset = check_request_header(frame, flexible=schema.__flexible__)
            check_entity(schema, frame, body_offset)
    except BoundsError as exc:
        raise FrameError(f"malformed {api_name(api_key)} v{api_version} request: {exc}") from exc
    (size,) = _CLIENT_ID_SIZE.unpack_from(frame, 8)
    try:
        client_id = frame[10 : 10 + size].decode() if size >= 0 else None
    except UnicodeDecodeError as exc:
        raise FrameError(f"client id is not UTF-8: {exc}") from exc
    return Request(frame, api_key, api_version, correlation_id, client_id, body_offset)


def encode_request(
    api_key: int, version: int, fields: dict[str, Any], *, client_id: str, correlation_id: int = 1
) -> Request:
    """A request of Switchyard's own, its body made of ``fields`` (frame without its size)."""
    body = make(request_schema(api_key, version), **fields)
    return request_of(body, client_id=client_id, correlation_id=correlation_id)


def request_of(body: Any, *, client_id: str, correlation_id: int = 1) -> Request:
    """A request of Switchyard's own carrying ``body``, a kio request (frame without its size)."""
    header = body.__header_schema__
    out = io.BytesIO()
    entity_writer(header)(
        out,
        header(
            request_api_key=i16(body.__api_key__),
            request_api_version=i16(body.__version__),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    entity_writer(type(body))(out, body)
    return parse_request(out.getvalue())


def response_correlation_id(frame: bytes) -> int:
    """The correlation id a response frame (without its size) begins with: which request it answers."""
    if len(frame) < 4:
        raise FrameError("response without a correlation id")
    return int(_SIZE.unpack_from(frame)[0])


def encode_response(request: Request, body: Any) -> bytes:
    """A whole response frame (size included) for ``request``, with the header its version needs."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header = response_header_schema(request.api_key, request.api_version)
    entity_writer(header)(out, header(correlation_id=i32(request.correlation_id)))
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(request: Request, frame: bytes) -> Any:
    """Decode a response frame (without its size) to the request's response schema."""
    schema = response_schema(request.api_key, request.api_version)
    flexible = response_header_schema(request.api_key, request.api_version) is ResponseHeaderV1
    try:
        offset = check_response_header(frame, flexible=flexible)
        check_entity(schema, frame, offset, any_null_array=True)
        body, _ = entity_reader(schema)(frame, offset)
    except Exception as exc:
        raise FrameError(f"undecodable {api_name(request.api_key)} response: {exc}") from exc
    return body


def replace_body(request: Request, body: Any) -> bytes:
    """The request's frame with its header as received and ``body`` encoded after it."""
    out = io.BytesIO()
    out.write(request.frame[: request.body_offset])
    entity_writer(type(body))(out, body)
    return out.getvalue()


def with_size(frame: bytes | bytearray) -> bytes:
    return _SIZE.pack(len(frame)) + frame


@cache
def request_schema(api_key: int, api_version: int) -> Any:
    return _schema(kio.index.load_request_schema, api_key, api_version)


@cache
def response_schema(api_key: int, api_version: int) -> Any:
    return _schema(kio.index.load_response_schema, api_key, api_version)


def _schema(load: Callable[[int, int], Any], api_key: int, api_version: int) -> Any:
    try:
        return load(api_key, api_version)
    except kio.index.KioIndexError as exc:
        raise FrameError(f"unknown API {api_key} v{api_version}") from exc


def _known(api_key: int, api_version: int) -> bool:
    versions = known_versions(api_key)
    return versions is not None and versions[0] <= api_version <= versions[1]


@cache
def is_flexible(api_key: int, api_version: int) -> bool:
    return bool(request_schema(api_key, api_version).__flexible__)


def response_header_schema(api_key: int, api_version: int) -> Any:
    # ApiVersions answers always use header v0, so that a client of any version can read them.
    if api_key == API_VERSIONS or not is_flexible(api_key, api_version):
        return ResponseHeaderV0
    return ResponseHeaderV1


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key, f"api {api_key}")


@cache
def known_versions(api_key: int) -> tuple[int, int] | None:
    """The lowest and highest version of an API that kio has schemas for."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = sorted(schema_name_map[name])
    return versions[0], versions[-1]
