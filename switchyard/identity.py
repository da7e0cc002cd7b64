"""Who a client is, from what it tells the gateway: its SASL user and its client.id.

With SASL/PLAIN the user name is the AppID (the broker authenticated it, so it wins over anything the
client.id claims) and the client.id is the InstanceID. Without SASL the client.id carries both:

    AppID@InstanceID      application and instance
    AppID                 application only
    HA#AppID#TopicName    the legacy form: the client is routed by the ``AppID#TopicName`` binding

An empty client.id without SASL is anonymous and goes to the default cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

LEGACY_PREFIX = "HA#"


@dataclass(frozen=True)
class Identity:
    app: str
    """Empty for an anonymous client."""
    instance: str | None = None
    legacy_topic: str | None = None
    """The topic a legacy ``HA#AppID#TopicName`` client.id pins the client to."""

    @property
    def anonymous(self) -> bool:
        return not self.app

    def __str__(self) -> str:
        if self.anonymous:
            return "(anonymous)"
        if self.legacy_topic is not None:
            return f"{self.app} (legacy topic {self.legacy_topic})"
        return self.app if self.instance is None else f"{self.app}@{self.instance}"


def identify(*, sasl_user: str | None, client_id: str | None) -> Identity:
    client_id = client_id or ""
    legacy = _legacy(client_id)
    if sasl_user:
        if legacy is not None:
            return Identity(sasl_user, legacy_topic=legacy[1])
        return Identity(sasl_user, instance=client_id or None)
    if legacy is not None:
        return Identity(legacy[0], legacy_topic=legacy[1])
    app, sep, instance = client_id.partition("@")
    return Identity(app, instance=instance or None) if sep and app else Identity(client_id)


def _legacy(client_id: str) -> tuple[str, str] | None:
    if not client_id.startswith(LEGACY_PREFIX):
        return None
    app, sep, topic = client_id[len(LEGACY_PREFIX) :].partition("#")
    return (app, topic) if sep and app and topic else None
