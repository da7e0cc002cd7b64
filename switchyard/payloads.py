"""How a saga's step requests and results become Temporal payloads and back: the SDK's JSON, decoded
faster.

The SDK turns JSON into a dataclass by reading the class's type hints again for every value
(``typing.get_type_hints``, which evaluates each annotation's string): a drain's result for 300
partitions — 600 partition ends — took 18 to 29 ms to decode, and the held steps of a switch cross the
converter four times while clients wait. Here each class's field types are read once, and a plain field
(a partition end's topic, number and offset) is taken without the SDK's walk over it. Encoding turns a
dataclass into a dict one level at a time, where the SDK's ``dataclasses.asdict`` deep-copies it first.
The JSON is the SDK's own, byte for byte, so histories written before read the same.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from temporalio.converter import (
    AdvancedJSONEncoder,
    CompositePayloadConverter,
    DefaultPayloadConverter,
    JSONPlainPayloadConverter,
    JSONTypeConverter,
    value_to_type,
)

_PLAIN = (str, int, bool)
"""Field types taken as JSON gives them (after a type check) rather than through ``value_to_type``."""


class _SagaDataclasses(JSONTypeConverter):
    """Decodes Switchyard's dataclasses with their field types read once per class."""

    def __init__(self) -> None:
        self._fields: dict[type, tuple[tuple[str, Any], ...]] = {}

    def to_typed_value(self, hint: type, value: Any) -> Any:
        fields = self._fields.get(hint)
        if fields is None:
            if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
                return JSONTypeConverter.Unhandled
            if not hint.__module__.startswith("switchyard."):
                return JSONTypeConverter.Unhandled
            hints = typing.get_type_hints(hint)
            fields = tuple((f.name, hints[f.name]) for f in dataclasses.fields(hint) if f.init)
            self._fields[hint] = fields
        if not isinstance(value, dict):
            raise TypeError(f"Cannot convert to dataclass {hint.__name__}, value is {type(value).__name__}")
        given: dict[str, Any] = {}
        for name, field_type in fields:
            if name not in value:
                continue  # the default applies; a missing required field fails in the constructor
            item = value[name]
            if field_type in _PLAIN and type(item) is field_type:
                given[name] = item
            else:
                given[name] = value_to_type(field_type, item, [self])
        return hint(**given)


class _ShallowEncoder(AdvancedJSONEncoder):
    """Gives the JSON encoder a dataclass's fields as they are; it comes back for the ones inside."""

    _names: typing.ClassVar[dict[type, tuple[str, ...]]] = {}

    def default(self, o: Any) -> Any:
        names = self._names.get(type(o))
        if names is None:
            if not dataclasses.is_dataclass(o) or isinstance(o, type):
                return super().default(o)
            names = self._names[type(o)] = tuple(f.name for f in dataclasses.fields(o))
        return {name: getattr(o, name) for name in names}


class _SagaJSON(JSONPlainPayloadConverter):
    def __init__(self) -> None:
        super().__init__(encoder=_ShallowEncoder, custom_type_converters=[_SagaDataclasses()])


class SagaPayloads(CompositePayloadConverter):
    """The SDK's default payload converters, with its JSON one decoding Switchyard's dataclasses faster."""

    def __init__(self) -> None:
        super().__init__(
            *(
                _SagaJSON() if isinstance(each, JSONPlainPayloadConverter) else each
                for each in DefaultPayloadConverter.default_encoding_payload_converters
            )
        )
