"""Binding keys: the names under which a client identity is bound to a cluster.

Text forms, most specific first::

    AppID##Group      requests that name a consumer group
    AppID#Topic       requests that name topics
    AppID@Instance    one client instance (its client.id)
    AppID             everything of the application

In the text form a backslash escapes ``\\``, ``@`` and ``#`` inside a part, so any AppID, instance id or
group name round-trips. In ZooKeeper each part is one path segment, percent-encoded, so ``/``, ``.``,
``..`` and characters ZooKeeper refuses never reach a path.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import quote, unquote


class KeyKind(StrEnum):
    APP = "app"
    INSTANCE = "instance"
    TOPIC = "topic"
    GROUP = "group"


_SEPARATOR = {KeyKind.INSTANCE: "@", KeyKind.TOPIC: "#", KeyKind.GROUP: "##"}
_FOLDER = {KeyKind.INSTANCE: "instances", KeyKind.TOPIC: "topics", KeyKind.GROUP: "groups"}
_KIND_OF_FOLDER = {folder: kind for kind, folder in _FOLDER.items()}
_SPECIAL = "\\@#"


@dataclass(frozen=True, order=True)
class BindingKey:
    app: str
    kind: KeyKind = KeyKind.APP
    name: str | None = None
    """The instance id, topic or group; None for an AppID key."""

    def __post_init__(self) -> None:
        if not self.app:
            raise ValueError("a binding key needs an AppID")
        if (self.kind is KeyKind.APP) != (self.name is None):
            raise ValueError(
                f"a {self.kind} key {'takes no' if self.kind is KeyKind.APP else 'needs a'} name"
            )
        if self.name == "":
            raise ValueError(f"the {self.kind} name of a binding key is empty")

    @classmethod
    def for_app(cls, app: str) -> BindingKey:
        return cls(app)

    @classmethod
    def instance(cls, app: str, instance_id: str) -> BindingKey:
        return cls(app, KeyKind.INSTANCE, instance_id)

    @classmethod
    def topic(cls, app: str, topic: str) -> BindingKey:
        return cls(app, KeyKind.TOPIC, topic)

    @classmethod
    def group(cls, app: str, group: str) -> BindingKey:
        return cls(app, KeyKind.GROUP, group)

    def __str__(self) -> str:
        if self.name is None:
            return _escape(self.app)
        return f"{_escape(self.app)}{_SEPARATOR[self.kind]}{_escape(self.name)}"

    @classmethod
    def parse(cls, text: str, *, check: bool = True) -> BindingKey:
        """Parse the text form; raises ValueError saying what is wrong. ``check=False`` reads back what
        was stored before names were checked (:meth:`check`), as it is."""
        app, i = _read_part(text, 0)
        if i == len(text):
            if not app:
                _fail(text, "the AppID is empty")
            key = cls(app)
            if check:
                key.check()
            return key
        if text.startswith("##", i):
            kind, i = KeyKind.GROUP, i + 2
        elif text[i] == "#":
            kind, i = KeyKind.TOPIC, i + 1
        else:
            kind, i = KeyKind.INSTANCE, i + 1
        name, end = _read_part(text, i, stop_at_separator=False)
        if not app:
            _fail(text, "the AppID is empty")
        if not name:
            _fail(text, f"the {kind} name is empty")
        assert end == len(text)
        key = cls(app, kind, name)
        if check:
            key.check()
        return key

    def check(self) -> None:
        """Refuse what would make a key hard to see or type (raises ValueError saying what)."""
        check_name("the AppID", self.app)
        if self.name is not None:
            check_name(f"the {self.kind} name", self.name)

    @property
    def path(self) -> str:
        """The node path relative to the bindings folder."""
        if self.name is None:
            return _segment(self.app)
        return f"{_segment(self.app)}/{_FOLDER[self.kind]}/{_segment(self.name)}"

    @classmethod
    def from_path(cls, path: str) -> BindingKey:
        parts = path.split("/")
        if len(parts) == 1:
            return cls(unquote(parts[0]))
        if len(parts) == 3 and parts[1] in _KIND_OF_FOLDER:
            return cls(unquote(parts[0]), _KIND_OF_FOLDER[parts[1]], unquote(parts[2]))
        raise ValueError(f"not a binding path: {path!r}")

    @property
    def specificity(self) -> int:
        """Higher wins: group > topic > instance > app."""
        return [KeyKind.APP, KeyKind.INSTANCE, KeyKind.TOPIC, KeyKind.GROUP].index(self.kind)


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories refused in names: control and format characters, surrogates, line breaks."""


def check_name(what: str, value: str) -> str:
    """``value`` if it can name an AppID, instance, topic, group, cluster or link; else ValueError.

    Names are compared exactly, so a name with a trailing space or a line break in it would be a
    different key from the one the operator sees, and lookups would miss it silently.
    """
    if not value:
        raise ValueError(f"{what} is empty")
    if value != value.strip():
        raise ValueError(f"{what} {value!r} begins or ends with white space")
    for position, char in enumerate(value):
        if unicodedata.category(char) in _INVISIBLE:
            raise ValueError(f"{what} {value!r} has an invisible character {char!r} at {position}")
    return value


def folders() -> tuple[str, ...]:
    """The sub-folders of an AppID node that hold its finer keys."""
    return tuple(_FOLDER.values())


def _segment(part: str) -> str:
    if part in (".", ".."):
        return "%2E" * len(part)
    return quote(part, safe="")


def _escape(part: str) -> str:
    return "".join("\\" + c if c in _SPECIAL else c for c in part)


def _read_part(text: str, start: int, *, stop_at_separator: bool = True) -> tuple[str, int]:
    out: list[str] = []
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 == len(text):
                _fail(text, "it ends with a lone backslash")
            out.append(text[i + 1])
            i += 2
            continue
        if stop_at_separator and c in "@#":
            break
        out.append(c)
        i += 1
    return "".join(out), i


def _fail(text: str, problem: str) -> BindingKey:
    raise ValueError(f"bad binding key {text!r}: {problem}")
