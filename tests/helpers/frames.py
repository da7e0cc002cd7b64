"""Kafka request frames for every API and version, and the same frames with one length field broken.

``example`` builds an entity of any kio schema with every field filled (arrays of two, strings of two
characters). ``Encoded`` writes it the way the protocol does — written here independently of kio's
writer (tests compare the two byte for byte) and of the gateway's bounds check — remembering where
each length field (string, bytes, array, tagged field, nullable-entity marker) sits. ``broken`` then
yields the frame with one of those lengths set to the largest value its encoding holds, to a negative
one, or to one more than the bytes that are left; ``emptied`` the entity with one array or string made
null or empty.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static import primitive as p

_VALUES: dict[str, Any] = {
    "bool": True,
    "int8": p.i8(1),
    "uint8": p.u8(1),
    "int16": p.i16(1),
    "uint16": p.u16(1),
    "error_code": ErrorCode.none,
    "int32": p.i32(1),
    "uint32": p.u32(1),
    "timedelta_i32": p.i32Timedelta.parse(datetime.timedelta(milliseconds=5)),
    "int64": p.i64(1),
    "uint64": p.u64(1),
    "timedelta_i64": p.i64Timedelta.parse(datetime.timedelta(milliseconds=5)),
    "datetime_i64": p.TZAware.parse(datetime.datetime.fromtimestamp(1, datetime.UTC)),
    "float64": p.f64(1.5),
    "uuid": uuid.UUID(int=7),
    "string": "ab",
    "bytes": b"xyz",
    "records": p.Records(b"rec"),
}
_FIXED = {"bool": ">b", "int8": ">b", "uint8": ">B", "int16": ">h", "uint16": ">H", "error_code": ">h",
          "int32": ">i", "uint32": ">I", "timedelta_i32": ">i", "int64": ">q", "uint64": ">Q",
          "timedelta_i64": ">q", "datetime_i64": ">q", "float64": ">d"}  # fmt: skip


def example(schema: Any) -> Any:
    """An entity of ``schema`` with every field set, arrays holding two elements."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            values[f.name] = (example(kind.type_), example(kind.type_))
        elif isinstance(kind, EntityField):
            values[f.name] = example(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            values[f.name] = (_VALUES[f.metadata["kafka_type"]],) * 2
        else:
            values[f.name] = _VALUES[f.metadata["kafka_type"]]
    return schema(**values)


def emptied(entity: Any, path: str = "") -> Iterator[tuple[str, bool, Any]]:
    """``entity`` with one field made null or empty, for every array and string at any depth (in the
    first element of an array): (the field's path and what it became, whether the schema lets it be
    that, the entity). Well framed all, as a careless client or a fuzzer sends them."""
    for f in dataclasses.fields(entity):
        kind = classify_field(f)
        value = getattr(entity, f.name)
        here = f"{path}.{f.name}"
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            yield f"{here}=null", is_optional(f), dataclasses.replace(entity, **{f.name: None})
            yield f"{here}=[]", True, dataclasses.replace(entity, **{f.name: ()})
            if isinstance(kind, EntityTupleField) and value:
                for inner_path, allowed, inner in emptied(value[0], f"{here}[0]"):
                    yield inner_path, allowed, dataclasses.replace(entity, **{f.name: (inner, *value[1:])})
        elif isinstance(kind, EntityField):
            if value is not None:
                for inner_path, allowed, inner in emptied(value, here):
                    yield inner_path, allowed, dataclasses.replace(entity, **{f.name: inner})
        elif f.metadata["kafka_type"] == "string":
            yield f'{here}=""', True, dataclasses.replace(entity, **{f.name: ""})
            yield f"{here}=null", is_optional(f), dataclasses.replace(entity, **{f.name: None})


def kio_bytes(schema: Any, entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(schema)(out, entity)
    return out.getvalue()


@dataclass(frozen=True)
class Length:
    """A length field: where it starts, how it is encoded (``h``, ``i``: int16, int32; ``v``: unsigned
    varint holding length + 1, or the plain count of tagged fields / a tag's size; ``b``: int8 marker)."""

    at: int
    encoding: str
    plus_one: bool = False


@dataclass
class Encoded:
    """Bytes written field by field, with the length fields among them."""

    out: bytearray = field(default_factory=bytearray)
    lengths: list[Length] = field(default_factory=list)

    def request(self, schema: Any, entity: Any, *, correlation_id: int = 7, client_id: str = "fz") -> bytes:
        """A whole request frame (without its size): header, then ``entity``."""
        self.out += struct.pack(">hhi", schema.__api_key__, schema.__version__, correlation_id)
        self._legacy(client_id.encode(), ">h")
        if schema.__flexible__:
            self._uvarint(0, length=True)  # no tagged fields in the header
        self.entity(schema, entity)
        return bytes(self.out)

    def entity(self, schema: Any, entity: Any) -> None:
        flexible = bool(schema.__flexible__)
        tagged = []
        for f in dataclasses.fields(schema):
            if get_field_tag(f) is not None:
                if getattr(entity, f.name) != f.default:  # one at its default is left out, as kio does
                    tagged.append(f)
            else:
                self._field(f, getattr(entity, f.name), flexible)
        if flexible:
            self._uvarint(len(tagged), length=True)
            for f in sorted(tagged, key=lambda t: int(get_field_tag(t) or 0)):
                inner = Encoded()
                inner._field(f, getattr(entity, f.name), flexible)
                self._uvarint(int(get_field_tag(f) or 0))
                self._uvarint(len(inner.out), length=True)
                start = len(self.out)
                self.lengths += [dataclasses.replace(n, at=n.at + start) for n in inner.lengths]
                self.out += inner.out

    def _field(self, f: dataclasses.Field[Any], value: Any, flexible: bool) -> None:
        """One field; ``None`` is written as null whether the schema allows it or not (tests send both)."""
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            if value is None:
                self._count(-1, flexible)
                return
            self._count(len(value), flexible)
            for item in value:
                if isinstance(kind, EntityTupleField):
                    self.entity(kind.type_, item)
                else:
                    self._primitive(f.metadata["kafka_type"], item, flexible)
        elif isinstance(kind, EntityField):
            if is_optional(f) or value is None:
                self.lengths.append(Length(len(self.out), "b"))
                self.out += b"\x01" if value is not None else b"\xff"
            if value is not None:
                self.entity(kind.type_, value)
        else:
            self._primitive(f.metadata["kafka_type"], value, flexible)

    def _primitive(self, kafka_type: str, value: Any, flexible: bool) -> None:
        if kafka_type in _FIXED:
            raw = value.value if isinstance(value, ErrorCode) else value
            if isinstance(raw, datetime.timedelta):
                raw = int(raw.total_seconds() * 1000)
            if isinstance(raw, datetime.datetime):
                raw = int(raw.timestamp() * 1000)
            self.out += struct.pack(_FIXED[kafka_type], raw)
        elif kafka_type == "uuid":
            self.out += value.bytes
        elif value is None:
            if flexible:
                self._uvarint(0, length=True, plus_one=True)
            else:
                self._legacy(None, ">h" if kafka_type == "string" else ">i")
        else:
            data = value.encode() if isinstance(value, str) else bytes(value)
            if flexible:
                self._uvarint(len(data) + 1, length=True, plus_one=True)
                self.out += data
            else:
                self._legacy(data, ">h" if kafka_type == "string" else ">i")

    def _legacy(self, data: bytes | None, size: str) -> None:
        self.lengths.append(Length(len(self.out), size[1]))
        self.out += struct.pack(size, -1) if data is None else struct.pack(size, len(data)) + data

    def _count(self, count: int, flexible: bool) -> None:
        if flexible:
            self._uvarint(count + 1, length=True, plus_one=True)
        else:
            self.lengths.append(Length(len(self.out), "i"))
            self.out += struct.pack(">i", count)

    def _uvarint(self, value: int, *, length: bool = False, plus_one: bool = False) -> None:
        if length:
            self.lengths.append(Length(len(self.out), "v", plus_one))
        self.out += uvarint(value)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_uvarint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7


def broken(frame: bytes, lengths: list[Length]) -> Iterator[tuple[str, bytes]]:
    """Each length field set to its encoding's largest value, to a negative one, and to one more than
    the bytes left after it: (what was done, the frame)."""
    for length in lengths:
        at = length.at
        if length.encoding == "b":
            yield f"marker at {at} = 7", frame[:at] + b"\x07" + frame[at + 1 :]
            continue
        if length.encoding in "hi":
            fmt = ">h" if length.encoding == "h" else ">i"
            end = at + struct.calcsize(fmt)
            left = len(frame) - end
            for what, value in (
                ("largest", 2 ** (struct.calcsize(fmt) * 8 - 1) - 1),
                ("negative", -2),
                ("past the end", left + 1),
            ):
                if value < 2 ** (struct.calcsize(fmt) * 8 - 1):
                    yield f"{what} {fmt[1]} at {at}", frame[:at] + struct.pack(fmt, value) + frame[end:]
            continue
        _, end = _read_uvarint(frame, at)
        left = len(frame) - end
        for what, value in (
            ("largest", 2**32 - 1),
            ("past the end", left + (2 if length.plus_one else 1)),
        ):
            yield f"{what} varint at {at}", frame[:at] + uvarint(value) + frame[end:]


PATTERNS = (b"\x7f\xff", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\xff\xfe", b"\xff\xff\xff\xff\x0f",
            b"\x80\x80\x80\x80\x08", b"\x00\x00\x10\x00", b"\x10\x00", b"\xff", b"\x00")  # fmt: skip
"""Overwritten at every offset: the largest int16/int32, negatives, the largest and a huge varint,
moderately large and zero lengths."""


def everywhere(body: bytes) -> Iterator[bytes]:
    """``body`` cut short at every offset, and overwritten at every offset with each of ``PATTERNS``:
    whatever the schema, every length field meets every pattern."""
    for cut in range(len(body)):
        yield body[:cut]
    for at in range(len(body)):
        for pattern in PATTERNS:
            yield body[:at] + pattern + body[at + len(pattern) :]


def decode_mutations() -> tuple[int, int]:
    """Check every mutation of every request schema's example body, and give kio each one the check
    lets through; (mutations, let through). Run in a child process: a miss aborts it."""
    import kio.index
    from kio.schema.index import api_key_map, schema_name_map
    from kio.serial import entity_reader

    from switchyard.frames.bounds import BoundsError, check_entity

    tried = passed = 0
    for key, name in api_key_map.items():
        for version in schema_name_map[name]:
            try:
                schema = kio.index.load_request_schema(key, version)
            except kio.index.KioIndexError:
                continue
            reader = entity_reader(schema)
            for body in everywhere(kio_bytes(schema, example(schema))):
                tried += 1
                try:
                    check_entity(schema, body, 0)
                except BoundsError:
                    continue
                passed += 1
                with contextlib.suppress(Exception):  # kio may refuse it; an abort is what is tested for
                    reader(body, 0)
    return tried, passed


if __name__ == "__main__":
    print(*decode_mutations())
