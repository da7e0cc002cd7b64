"""Building kio entities: kio's dataclasses have no defaults for required fields, answers need them."""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode


def make(cls: Any, **given: Any) -> Any:
    """An instance of a kio entity: the given fields, defaults, and zero values for required others."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given:
            values[f.name] = given[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = _zero(hints[f.name])
    return cls(**values)


def element_type(cls: Any, field_name: str) -> Any:
    """The entity type of an array field (``tuple[X, ...]``, possibly nullable)."""
    hint = _hints(cls)[field_name]
    array = next((a for a in typing.get_args(hint) if typing.get_origin(a) is tuple), hint)
    return typing.get_args(array)[0]


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _zero(hint: Any) -> Any:
    args = typing.get_args(hint)
    if type(None) in args:
        return None
    if typing.get_origin(hint) is tuple:
        return ()
    base = getattr(hint, "__bound__", None) or hint
    for kind, zero in (
        (ErrorCode, ErrorCode.none),
        (bool, False),
        (int, 0),
        (str, ""),
        (bytes, b""),
        (datetime.timedelta, datetime.timedelta(0)),
        (uuid.UUID, uuid.UUID(int=0)),
    ):
        if isinstance(base, type) and issubclass(base, kind):
            return zero
    raise TypeError(f"no zero value for {hint!r}")


def replace_known(entity: Any, **changes: Any) -> Any:
    """dataclasses.replace for the fields this version of the entity has (the others are ignored)."""
    names = {f.name for f in dataclasses.fields(entity)}
    return dataclasses.replace(entity, **{k: v for k, v in changes.items() if k in names})
