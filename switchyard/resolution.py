"""Which binding a request follows, and why.

Priority, most specific first: the group's key (``AppID##Group``) for requests that name a group; the
topic keys (``AppID#Topic``) when *every* topic of the request has one and they all agree; the instance
key (``AppID@Instance``); the AppID key; the default cluster. Because the most specific bound key always
wins, switching one key never moves a request that has a binding of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from switchyard.identity import Identity
from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState


@dataclass(frozen=True)
class Resolution:
    cluster: str
    state: BindingState
    keys: tuple[BindingKey, ...]
    """The bindings that decided; empty when the default cluster applies."""
    epoch: int
    """The newest epoch among those bindings (0 for the default cluster)."""
    reason: str


def resolve(
    identity: Identity,
    bindings: Mapping[BindingKey, Binding],
    default_cluster: str,
    *,
    topics: Collection[str] = (),
    group: str | None = None,
) -> Resolution:
    if identity.anonymous:
        return Resolution(default_cluster, BindingState.ACTIVE, (), 0, "anonymous client: default cluster")
    app = identity.app
    notes: list[str] = []

    if group is not None:
        key = BindingKey.group(app, group)
        if key in bindings:
            return _decided((key,), bindings, f"group binding {key}")
        notes.append(f"group {group!r} has no binding")

    wanted = list(topics) or ([identity.legacy_topic] if identity.legacy_topic else [])
    if wanted:
        keys = tuple(BindingKey.topic(app, t) for t in dict.fromkeys(wanted))
        missing = [str(k) for k in keys if k not in bindings]
        targets = {(bindings[k].cluster, bindings[k].state) for k in keys if k in bindings}
        if not missing and len(targets) == 1:
            why = "legacy client.id topic binding" if not topics else "every topic has the same binding"
            return _decided(keys, bindings, f"{why}: {', '.join(map(str, keys))}")
        if missing and len(missing) < len(keys):
            notes.append(f"topic bindings not used: no binding for {', '.join(missing)}")
        elif len(targets) > 1:
            notes.append("topic bindings not used: the request's topics are bound to different places")

    if identity.instance is not None:
        key = BindingKey.instance(app, identity.instance)
        if key in bindings:
            return _decided((key,), bindings, _with(f"instance binding {key}", notes))

    key = BindingKey.for_app(app)
    if key in bindings:
        return _decided((key,), bindings, _with(f"AppID binding {key}", notes))
    return Resolution(
        default_cluster, BindingState.ACTIVE, (), 0, _with(f"{app} has no binding: default cluster", notes)
    )


def _decided(keys: tuple[BindingKey, ...], bindings: Mapping[BindingKey, Binding], reason: str) -> Resolution:
    first = bindings[keys[0]]
    return Resolution(first.cluster, first.state, keys, max(bindings[k].epoch for k in keys), reason)


def _with(reason: str, notes: list[str]) -> str:
    return "; ".join([reason, *notes])
