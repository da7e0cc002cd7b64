"""The saga's payload converter writes the SDK's JSON byte for byte and reads it back to the same values:
histories written with the SDK's own converter replay, and a step's result survives the trip whole."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from temporalio.converter import DataConverter

from switchyard.sagas import drills, evacuations, requests, steps
from switchyard.sagas.drills import DrillResult
from switchyard.sagas.steps import Drained, PartitionEnd
from switchyard.temporal import data_converter

SDK = DataConverter.default.payload_converter
OURS = data_converter().payload_converter

DATACLASSES = sorted(
    (
        cls
        for module in (steps, requests, drills, evacuations)
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    ),
    key=lambda cls: f"{cls.__module__}.{cls.__name__}",
)


def test_every_step_dataclass_is_covered() -> None:
    assert len(DATACLASSES) > 40
    assert {Drained, PartitionEnd} <= set(DATACLASSES)


@pytest.mark.parametrize("cls", DATACLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_step_value_is_written_as_the_sdk_writes_it_and_read_back_whole(cls: type, data: Any) -> None:
    value = data.draw(_values(cls))
    [written] = OURS.to_payloads([value])
    [sdk_written] = SDK.to_payloads([value])
    assert written == sdk_written
    assume(b"NaN" not in written.data)  # NaN is written as the SDK writes it, but is not equal to itself
    assert OURS.from_payloads([written], [cls]) == SDK.from_payloads([written], [cls]) == [value]


def _values(cls: type) -> st.SearchStrategy[Any]:
    if cls is DrillResult:  # its sagas are JSON objects (``dict[str, Any]``), which from_type cannot make
        json = st.dictionaries(st.text(), st.integers() | st.text() | st.booleans())
        return st.builds(DrillResult, sagas=st.lists(json))
    return st.from_type(cls)


def test_a_payload_missing_a_required_field_or_of_the_wrong_type_is_refused() -> None:
    [written] = OURS.to_payloads([{"topic": "t", "partition": 0}])
    with pytest.raises(TypeError):
        OURS.from_payloads([written], [PartitionEnd])
    [written] = OURS.to_payloads([{"topic": "t", "partition": "0", "end": 1}])
    with pytest.raises(TypeError):
        OURS.from_payloads([written], [PartitionEnd])
    [written] = OURS.to_payloads([["t", 0, 1]])
    with pytest.raises(TypeError):
        OURS.from_payloads([written], [PartitionEnd])


def test_a_field_the_class_no_longer_has_is_ignored_and_a_missing_default_applies() -> None:
    """As the SDK does: a history written by an older or newer version of a step still decodes."""
    [written] = OURS.to_payloads([{"target_ends": [], "records": 3, "gone": 1}])
    assert OURS.from_payloads([written], [Drained]) == [Drained(target_ends=[], records=3, source_ends=[])]
