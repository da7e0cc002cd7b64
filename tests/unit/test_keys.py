from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.keys import BindingKey, KeyKind, check_name


def _well_formed(name: str) -> bool:
    try:
        check_name("a name", name)
    except ValueError:
        return False
    return True


text = st.text(min_size=1, max_size=20)
"""Any name: ZooKeeper paths must hold whatever was stored before names were checked."""
names = text.filter(_well_formed)


def key_strategy(part: st.SearchStrategy[str]) -> st.SearchStrategy[BindingKey]:
    return st.one_of(
        st.builds(BindingKey.for_app, part),
        st.builds(BindingKey.instance, part, part),
        st.builds(BindingKey.topic, part, part),
        st.builds(BindingKey.group, part, part),
    )


keys = key_strategy(text)


@given(key_strategy(names))
def test_text_form_round_trips(key: BindingKey) -> None:
    assert BindingKey.parse(str(key)) == key


@given(keys)
def test_a_key_parses_back_exactly_or_is_refused_with_the_reason(key: BindingKey) -> None:
    parts = [key.app] if key.name is None else [key.app, key.name]
    if all(_well_formed(p) for p in parts):
        assert BindingKey.parse(str(key)) == key
    else:
        with pytest.raises(ValueError, match=r"white space|invisible character"):
            BindingKey.parse(str(key))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (" orders", "the AppID ' orders' begins or ends with white space"),
        ("orders\n@host", "the AppID 'orders\\n' begins or ends with white space"),
        ("orders@host\t", "the instance name 'host\\t' begins or ends with white space"),
        ("orders##g\u200b1", "the group name 'g\\u200b1' has an invisible character '\\u200b' at 1"),
        ("orders#pay\x07ments", "the topic name 'pay\\x07ments' has an invisible character '\\x07' at 3"),
    ],
)
def test_names_that_would_hide_from_an_operator_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        BindingKey.parse(text)


@given(keys)
def test_path_round_trips_and_is_a_safe_zookeeper_path(key: BindingKey) -> None:
    path = key.path
    assert BindingKey.from_path(path) == key
    segments = path.split("/")
    assert all(seg and seg not in (".", "..") for seg in segments)
    assert all(c.isascii() and c.isprintable() for c in path)
    assert len(segments) == (1 if key.kind is KeyKind.APP else 3)


@given(keys, keys)
def test_distinct_keys_have_distinct_paths(a: BindingKey, b: BindingKey) -> None:
    assert (a == b) == (a.path == b.path)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("orders", BindingKey.for_app("orders")),
        ("orders@host-7", BindingKey.instance("orders", "host-7")),
        ("orders#payments", BindingKey.topic("orders", "payments")),
        ("orders##billing", BindingKey.group("orders", "billing")),
        (r"a\@b@i", BindingKey.instance("a@b", "i")),
        (r"a\#b##g\#1", BindingKey.group("a#b", "g#1")),
        ("app##g#x", BindingKey.group("app", "g#x")),
    ],
)
def test_parse_examples(text: str, key: BindingKey) -> None:
    assert BindingKey.parse(text) == key


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "the AppID is empty"),
        ("@i", "the AppID is empty"),
        ("a@", "the instance name is empty"),
        ("a#", "the topic name is empty"),
        ("a##", "the group name is empty"),
        ("a\\", "lone backslash"),
    ],
)
def test_parse_errors_say_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        BindingKey.parse(text)


def test_specificity_order() -> None:
    ranks = [BindingKey.for_app("a"), BindingKey.instance("a", "i"), BindingKey.topic("a", "t")]
    ranks.append(BindingKey.group("a", "g"))
    assert [k.specificity for k in ranks] == [0, 1, 2, 3]


def test_special_segments_are_encoded() -> None:
    assert BindingKey.instance("..", "a/b").path == "%2E%2E/instances/a%2Fb"
