"""Whom else a switch would touch: keys nobody knows, and the applications that share the link it promotes.

Promoting a link makes its topics the mirror's alone on the source (the reverse link writes them there),
so a switch must promote only the topics of the keys it moves. The gateways' record of who used what
(:mod:`switchyard.usage`, kept for ``gateway.usage_window_s``) says which those are:

- a key no binding names and no gateway saw is refused (a typo must not promote a link);
- the link's topics that the moving keys use move with them (all of them, when the gateways saw the keys
  use none); where the link carries others too, the switch splits it (``Division.split``): the moving
  topics go to a link of their own, which the switch promotes, and the rest keep being copied;
- a moving topic that an identity staying on the source writes is refused, naming who must move too: its
  writes would be refused there after the promotion. One that a staying identity only reads is not: the
  reverse link copies the records back where it reads them;
- a Kafka Streams internal topic (a changelog, a repartition topic) that the keys use and the link does not
  copy is refused, naming it: on the target the application would restore its state from nothing and
  lose the records in flight between its sub-topologies, and exactly-once with them.

Reads only: a plan's step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from switchyard.identity import Identity
from switchyard.keys import BindingKey, KeyKind
from switchyard.model import Binding, BindingState, Link
from switchyard.resolution import Resolution, resolve
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.usage import CONSUME, PRODUCE, Use, uses_of

STREAMS_INTERNAL = ("-changelog", "-repartition", "-subscription-registration-topic",
                    "-subscription-response-topic")  # fmt: skip
"""How Kafka Streams names the topics it makes for an application (``<application.id>-<name><suffix>``)."""


class Unshareable(Exception):
    """Why the switch must not go ahead as asked (the words the plan refuses with)."""


@dataclass
class Division:
    """How a switch divides its link: the topics that move with the keys, and those that stay."""

    moving: list[str]
    staying: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)
    """Identities left on the source that read a moving topic (there, the reverse link's copy)."""

    @property
    def split(self) -> bool:
        """Whether the link carries topics that must not move: the moving ones get a link of their own."""
        return bool(self.moving and self.staying)


def unknown_keys(keys: Iterable[BindingKey], snapshot: RoutingSnapshot, uses: list[Use]) -> list[BindingKey]:
    """The keys that no binding names and whose clients no gateway saw within the window."""
    return [key for key in keys if key not in snapshot.bindings and not uses_of(uses, [key])]


def divide(
    keys: list[BindingKey],
    link: Link,
    topics: Iterable[str],
    *,
    snapshot: RoutingSnapshot,
    default_cluster: str,
    uses: list[Use],
    held: Callable[[set[str]], set[str]] = lambda names: names,
) -> Division:
    """Which of the link's ``topics`` (on its source now) move with ``keys`` (all of them when the
    gateways saw the keys use no topic at all, or none the source still holds: ``held`` says which of
    some topics it does); :class:`Unshareable` when a moving topic is written by someone who stays, when
    a client's requests would name topics that move and topics that stay, or when the keys use topics
    only elsewhere."""
    after = dict(snapshot.bindings)
    when = datetime.now(UTC)
    for key in keys:
        after[key] = Binding(link.target, 0, BindingState.ACTIVE, when, "plan")
    on_link = set(topics)

    def deciding(use: Use, bindings: dict[BindingKey, Binding]) -> Resolution:
        identity = Identity(use.app, instance=use.instance)
        return resolve(identity, bindings, default_cluster, topics=[use.topic], group=use.group)

    def moves(use: Use) -> bool:
        return (
            deciding(use, snapshot.bindings).cluster == link.source
            and deciding(use, after).cluster == link.target
        )

    _one_way_each(uses, moves, lambda u: deciding(u, after).cluster == link.source, keys)
    used = [u for u in uses if u.topic in on_link]
    staying = [u for u in used if deciding(u, after).cluster == link.source]
    named = {k.name for k in keys if k.kind is KeyKind.TOPIC and k.name in on_link}
    moving = {u.topic for u in used if moves(u)} | named
    if not moving:
        # a use of a topic deleted since (a drill's, each run under the same key) says nothing
        theirs = sorted(held({u.topic for u in uses if u.topic and moves(u)}))
        if theirs:
            raise Unshareable(
                f"{', '.join(map(str, keys))} use{'s' if len(keys) == 1 else ''} "
                f"{', '.join(theirs[:5])}, which link {link.id} does not copy: is it the right link?"
            )
        moving = set(on_link)  # nothing says which are the keys': the whole link moves with them
    _internal_copied(uses, moves, on_link, keys, link)
    writers = [u for u in staying if u.role == PRODUCE and u.topic in moving]
    if writers:
        shared = sorted({u.topic for u in writers})
        # the key that keeps each writer there: its deciding binding, or its application's
        along = sorted({str((deciding(u, after).keys or (BindingKey.for_app(u.app),))[0]) for u in writers})
        one = len(shared) == 1
        raise Unshareable(
            f"{', '.join(shared[:5])} {'is' if one else 'are'} written by {_who(writers)} on "
            f"{link.source}, which would stay there: promoting {'it' if one else 'them'} makes "
            f"{link.source}'s copy the reverse link's alone, and those writes would be refused. Switch "
            f"them together: {' '.join([*map(str, keys), *along])}"
        )
    readers = sorted({f"{_identity(u)} reads {u.topic}" for u in staying if u.topic in moving})
    return Division(sorted(moving), sorted(on_link - moving), readers)


def _internal_copied(
    uses: list[Use], moves: Callable[[Use], bool], on_link: set[str], keys: list[BindingKey], link: Link
) -> None:
    uncopied = sorted({u.topic for u in uses if u.topic.endswith(STREAMS_INTERNAL) and u.topic not in on_link
                       and moves(u)})  # fmt: skip
    if uncopied:
        one = len(uncopied) == 1
        raise Unshareable(
            f"{', '.join(map(str, keys))} use{'s' if len(keys) == 1 else ''} {', '.join(uncopied[:5])}, "
            f"Kafka Streams' internal topic{'' if one else 's'}, which link {link.id} does not copy: on "
            f"{link.target} the application would restore its state without {'it' if one else 'them'} and "
            f"count again what it had counted. Switch along a link that copies the application's topics "
            f"and its internal ones (switchyard links create ... --include '<application.id>-.*')"
        )


def _one_way_each(
    uses: list[Use], moves: Callable[[Use], bool], stays: Callable[[Use], bool], keys: list[BindingKey]
) -> None:
    """A client's Produce or Fetch names every partition it has for one broker, and follows topic keys
    only when all of its topics are bound alike: one that writes (or reads) topics that move and
    topics that stay would stay whole on the source, its writes of the moving ones refused there."""
    requests = [u for u in uses if u.role in (PRODUCE, CONSUME) and u.group is None and u.topic]
    by_client: dict[tuple[str, str | None, str], list[Use]] = {}
    for use in requests:
        by_client.setdefault((use.app, use.instance, use.role), []).append(use)
    mixed = []
    for (app, instance, role), seen in by_client.items():
        going = sorted(u.topic for u in seen if moves(u))
        left = sorted(u.topic for u in seen if stays(u))
        if going and left:
            verb = "writes" if role == PRODUCE else "reads"
            mixed.append(f"{app}@{instance or '-'} {verb} {', '.join(going[:3])}, which move, and "
                         f"{', '.join(left[:3])}, which stay")  # fmt: skip
    if mixed:
        mixed.sort()
        raise Unshareable(
            f"{'; '.join(mixed[:3])}: one request names them all and follows neither's key, so it would "
            f"stay on the source. Switch the application whole, or bind its other topics "
            f"(App#topic) along with {', '.join(map(str, keys))}"
        )


def split_id(link: Link, moving: Iterable[str]) -> str:
    """The id of the link a split gives the moving topics: the same for the same split, so a plan run
    again (a retried step) names the link its first run made."""
    digest = hashlib.sha1("\n".join(sorted(moving)).encode()).hexdigest()[:8]
    return f"{link.id}-split-{digest}"


def _identity(use: Use) -> str:
    return f"{use.app}@{use.instance}" if use.instance else use.app


def _who(uses: list[Use]) -> str:
    names = sorted({_identity(u) for u in uses})
    return ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
