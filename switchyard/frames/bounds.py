"""Every length in a frame checked against the bytes that remain, before kio's decoder sees it.

kio decodes in native code that sizes an array from the count on the wire before it reads a single
element; a 21-byte request claiming 2^32-1 topics makes it ask for ~120 GB, and a failed allocation
aborts the process — nothing an ``except`` can catch. So every frame is walked first (a client's by the
gateway, a broker's answer by the gateway and by :mod:`switchyard.wire`), with the same schema kio would
use: every string, byte, array and tagged-field length must fit in what is left of the frame (an array
of N elements in N times the smallest encoding of one), nullable lengths may be -1 and nothing else
below 0, varints end within five bytes. Anything else raises :class:`BoundsError` (the codec's
``FrameError`` around it), which closes that one connection. Only then is the frame given to kio.

kio reads a null array as None whether the schema lets it be null or not, and code that reads a
request walks its arrays; a broker refuses such a request (Kafka's generated readers throw, and the
broker closes the connection), so in requests an array is null only where the schema says it may be.
Responses are read as kio reads them: what a broker sends is not the gateway's to refuse.

The walk reads lengths and skips payloads; it builds nothing. A plan is compiled once per schema.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class BoundsError(ValueError):
    """A length in the frame runs past its end, or is negative where it may not be."""


Step = Callable[[bytes, int, int], int]
"""``step(buffer, position, end) -> new position``; raises BoundsError."""

_FIXED = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}  # fmt: skip
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def check_request_header(buffer: bytes, *, flexible: bool) -> int:
    """The request header (key, version, correlation id, a client id that is int16-sized in every
    version, then tags when flexible); return where the body starts."""
    position = _need(buffer, 0, 8, len(buffer))
    position = _legacy_length(buffer, position, len(buffer), 1, nullable=True)
    return _tags({})(buffer, position, len(buffer)) if flexible else position


def check_response_header(buffer: bytes, *, flexible: bool) -> int:
    """The response header (correlation id, then tags when flexible); return where the body starts."""
    position = _need(buffer, 0, 4, len(buffer))
    return _tags({})(buffer, position, len(buffer)) if flexible else position


# ---- a frame walked by hand (workers.gateway.brokers.fetches), each length checked as above


def skipped(buffer: bytes, position: int, size: int) -> int:
    """Where what follows ``size`` bytes from ``position`` starts."""
    return _need(buffer, position, size, len(buffer))


def array_length(buffer: bytes, position: int, *, flexible: bool) -> tuple[int, int]:
    """An array's element count (a null one counts 0) and where its elements start."""
    count, after = _count(buffer, position, len(buffer), flexible, 1, nullable=True)
    return max(count, 0), after


def after_string(buffer: bytes, position: int, *, flexible: bool) -> int:
    """Where what follows a (nullable) string starts."""
    if flexible:
        return _compact_length(buffer, position, len(buffer), nullable=True)
    return _legacy_length(buffer, position, len(buffer), 1, nullable=True)


def bytes_field(buffer: bytes, position: int, *, flexible: bool) -> tuple[int, int]:
    """Where a (nullable) bytes field's content starts and ends: the same place when null or empty."""
    size, start = _length(buffer, position, len(buffer), flexible)
    return start, _payload(size, start, len(buffer), position, nullable=True)


def after_tags(buffer: bytes, position: int) -> int:
    """Where what follows a tagged-field section starts."""
    return _tags({})(buffer, position, len(buffer))


# ---- primitives of the walk


def _need(buffer: bytes, position: int, size: int, end: int) -> int:
    after = position + size
    if after > end:
        raise BoundsError(f"{size} bytes needed at {position}, {end - position} left")
    return after


def _uvarint(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    if position < end and buffer[position] < 0x80:  # one byte: nearly every length in practice
        return buffer[position], position + 1
    value = shift = 0
    for index in range(position, min(position + 5, end)):
        byte = buffer[index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, index + 1
        shift += 7
    raise BoundsError(f"unsigned varint at {position} does not end within 5 bytes or the frame")


def _legacy_length(buffer: bytes, position: int, end: int, width: int, *, nullable: bool) -> int:
    """Skip an int16- (width 1) or int32-sized (width 2) string or bytes field."""
    size_struct = _I16 if width == 1 else _I32
    after = _need(buffer, position, size_struct.size, end)
    (size,) = size_struct.unpack_from(buffer, position)
    return _payload(size, after, end, position, nullable=nullable)


def _compact_length(buffer: bytes, position: int, end: int, *, nullable: bool) -> int:
    encoded, after = _uvarint(buffer, position, end)
    return _payload(encoded - 1, after, end, position, nullable=nullable)


def _payload(size: int, after: int, end: int, position: int, *, nullable: bool) -> int:
    if size == -1 and nullable:
        return after
    if size < 0:
        raise BoundsError(f"length {size} at {position}")
    return _need(b"", after, size, end)


def _length(buffer: bytes, position: int, end: int, flexible: bool) -> tuple[int, int]:
    """An int32 length, or a compact one (an unsigned varint, one more than the length), and where what
    it measures starts."""
    if flexible:
        encoded, after = _uvarint(buffer, position, end)
        return encoded - 1, after
    after = _need(buffer, position, 4, end)
    (size,) = _I32.unpack_from(buffer, position)
    return int(size), after


def _count(
    buffer: bytes, position: int, end: int, flexible: bool, element_size: int, *, nullable: bool
) -> tuple[int, int]:
    """An array's element count (-1 for null, where ``nullable``) and where its elements start, checked
    against the bytes left: each element takes at least ``element_size`` bytes."""
    count, after = _length(buffer, position, end, flexible)
    if count < -1:
        raise BoundsError(f"array length {count} at {position}")
    if count == -1 and not nullable:
        raise BoundsError(f"null array at {position}, where the schema allows none")
    if count > 0 and count * element_size > end - after:
        raise BoundsError(f"array of {count} at {position} cannot fit in the {end - after} bytes left")
    return count, after


# ---- plans: one step per field, compiled once per schema


@dataclasses.dataclass(frozen=True)
class _Plan:
    step: Step
    smallest: int
    """The fewest bytes one value can take."""
    fixed: bool = False
    """Every value takes exactly ``smallest`` bytes (an array of them is skipped, not walked)."""


def check_entity(schema: Any, buffer: bytes, position: int, *, any_null_array: bool = False) -> int:
    """Walk one encoded ``schema`` entity from ``position``; return where it ends. ``any_null_array``:
    let arrays be null that the schema does not let be (for responses; see above)."""
    return _entity(schema, any_null_array).step(buffer, position, len(buffer))


@cache
def _entity(schema: Any, any_null_array: bool) -> _Plan:
    flexible = bool(schema.__flexible__)
    plans: list[_Plan] = []
    tagged: dict[int, Step] = {}
    for field in dataclasses.fields(schema):
        plan = _field(field, flexible, any_null_array)
        tag = get_field_tag(field)
        if tag is not None:
            tagged[int(tag)] = plan.step
        elif plan.fixed and plans and plans[-1].fixed:  # one bounds check for a run of fixed-size fields
            plans[-1] = _fixed(plans[-1].smallest + plan.smallest)
        else:
            plans.append(plan)
    if flexible:
        plans.append(_Plan(_tags(tagged), 1))
    steps = tuple(plan.step for plan in plans)
    smallest = sum(plan.smallest for plan in plans)
    if len(steps) == 1:
        return _Plan(steps[0], smallest, fixed=plans[0].fixed)

    def walk(buffer: bytes, position: int, end: int) -> int:
        for step in steps:
            position = step(buffer, position, end)
        return position

    return _Plan(walk, smallest, fixed=all(plan.fixed for plan in plans))


def _fixed(size: int) -> _Plan:
    def step(buffer: bytes, position: int, end: int) -> int:
        position += size
        if position > end:
            raise BoundsError(f"{size} bytes needed at {position - size}, {end - position + size} left")
        return position

    return _Plan(step, size, fixed=True)


def _field(field: dataclasses.Field[Any], flexible: bool, any_null_array: bool) -> _Plan:
    kind = classify_field(field)
    nullable = is_optional(field)
    if isinstance(kind, EntityTupleField):
        return _array(_entity(kind.type_, any_null_array), flexible, nullable=nullable or any_null_array)
    if isinstance(kind, EntityField):
        inner = _entity(kind.type_, any_null_array)
        return _Plan(_nullable_entity(inner.step), 1) if nullable else inner
    primitive = _primitive(field.metadata["kafka_type"], flexible, nullable=nullable)
    if isinstance(kind, PrimitiveTupleField):
        return _array(primitive, flexible, nullable=nullable or any_null_array)
    return primitive


def _primitive(kafka_type: str, flexible: bool, *, nullable: bool) -> _Plan:
    size = _FIXED.get(kafka_type)
    if size is not None:
        return _fixed(size)
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no bounds check for Kafka type {kafka_type!r}")
    if flexible:
        return _Plan(
            lambda buffer, position, end: _compact_length(buffer, position, end, nullable=nullable), 1
        )
    width, smallest = (1, 2) if kafka_type == "string" else (2, 4)
    return _Plan(
        lambda buffer, position, end: _legacy_length(buffer, position, end, width, nullable=nullable),
        smallest,
    )


def _array(element: _Plan, flexible: bool, *, nullable: bool) -> _Plan:
    step, size = element.step, max(element.smallest, 1)

    def walk(buffer: bytes, position: int, end: int) -> int:
        count, position = _count(buffer, position, end, flexible, size, nullable=nullable)
        if element.fixed:
            return position + max(count, 0) * size  # _count checked that they fit
        for _ in range(count):
            position = step(buffer, position, end)
        return position

    return _Plan(walk, 1 if flexible else 4)


def _nullable_entity(inner: Step) -> Step:
    def walk(buffer: bytes, position: int, end: int) -> int:
        after = _need(buffer, position, 1, end)
        marker = buffer[position]
        if marker == 0xFF:  # -1: null
            return after
        if marker != 1:
            raise BoundsError(f"nullable entity marker {marker} at {position}")
        return inner(buffer, after, end)

    return walk


def _tags(known: dict[int, Step]) -> Step:
    """The tagged-field section: a count, then (tag, size, content); known tags' content is walked
    within its own size, unknown ones skipped."""

    def walk(buffer: bytes, position: int, end: int) -> int:
        if position < end and buffer[position] == 0:  # no tagged fields, as nearly always
            return position + 1
        count, position = _uvarint(buffer, position, end)
        if count * 2 > end - position:
            raise BoundsError(f"{count} tagged fields cannot fit in the {end - position} bytes left")
        for _ in range(count):
            tag, position = _uvarint(buffer, position, end)
            size, position = _uvarint(buffer, position, end)
            content_end = _need(buffer, position, size, end)
            step = known.get(tag)
            if step is not None and step(buffer, position, content_end) != content_end:
                raise BoundsError(f"tagged field {tag} at {position} does not fill its {size} bytes")
            position = content_end
        return position

    return walk
