"""The notifications Alertmanager (webhook version 4) and Grafana (version 1) send, as pydantic models, and
the one shape the rest of the receiver works on.

Fields are named as the senders spell them (``groupKey``, ``generatorURL``), so a bad one is named the same
way in the answer. Fields the receiver does not use are kept loose (annotations, URLs) and unknown ones
are ignored: a newer sender that adds a field must not be refused.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

AlertStatus = Literal["firing", "resolved"]
Fingerprint = Annotated[str, Field(min_length=1, max_length=256)]
Labels = dict[str, str]


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class AlertmanagerAlert(_Payload):
    status: AlertStatus
    labels: Labels
    annotations: Labels = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    """``0001-01-01T00:00:00Z`` while an alert fires without an end."""
    generatorURL: str = ""
    fingerprint: Fingerprint


class AlertmanagerNotification(_Payload):
    """What an Alertmanager ``webhook_configs`` receiver POSTs (version 4)."""

    version: Literal["4"]
    groupKey: Annotated[str, Field(min_length=1)]
    truncatedAlerts: Annotated[int, Field(ge=0)] = 0
    status: AlertStatus
    receiver: str
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    externalURL: str = ""
    """Which Alertmanager sent it: the only field in which an HA pair's two copies differ."""
    alerts: list[AlertmanagerAlert]

    def notification(self) -> Notification:
        return Notification(
            "alertmanager", f"alertmanager:{self.receiver}", self.groupKey, self.status, _alerts(self.alerts)
        )


class GrafanaAlert(AlertmanagerAlert):
    """Alertmanager's alert, with Grafana's links and values."""

    silenceURL: str = ""
    dashboardURL: str = ""
    panelURL: str = ""
    values: dict[str, Any] | None = None
    """The query results the rule evaluated (unused: kept loose)."""
    valueString: str = ""


class GrafanaNotification(_Payload):
    """What a Grafana alerting webhook contact point POSTs (version 1)."""

    version: Literal["1"]
    orgId: int
    groupKey: Annotated[str, Field(min_length=1)]
    status: AlertStatus
    receiver: str = ""
    truncatedAlerts: Annotated[int, Field(ge=0)] = 0
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[GrafanaAlert]
    title: str = ""
    state: str = ""
    message: str = ""

    def notification(self) -> Notification:
        return Notification(
            "grafana", f"grafana:{self.orgId}", self.groupKey, self.status, _alerts(self.alerts)
        )


@dataclass(frozen=True)
class Alert:
    status: AlertStatus
    labels: Labels
    annotations: Labels
    fingerprint: str

    @property
    def name(self) -> str:
        return self.labels.get("alertname", self.fingerprint)


@dataclass(frozen=True)
class Notification:
    """One notification, whoever sent it."""

    source: Literal["alertmanager", "grafana"]
    actor: str
    """Who starts or rejects sagas for it: ``alertmanager:<receiver>`` or ``grafana:<orgId>``."""
    group_key: str
    status: AlertStatus
    alerts: tuple[Alert, ...]

    @property
    def scope(self) -> tuple[str, str, str]:
        """The alert group the notification speaks for: its repeats and copies share it."""
        return (self.source, self.actor, self.group_key)

    @property
    def identity(self) -> str:
        """What makes two notifications the same one: the group, its status and each alert's fingerprint
        and status. Not the body: an HA pair's copies differ in ``externalURL``, and a repeat may differ in
        field order or in annotations that were re-templated."""
        alerts = sorted({(a.fingerprint, a.status) for a in self.alerts})
        text = json.dumps([*self.scope, self.status, alerts], separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _alerts(alerts: list[AlertmanagerAlert] | list[GrafanaAlert]) -> tuple[Alert, ...]:
    return tuple(Alert(a.status, a.labels, a.annotations, a.fingerprint) for a in alerts)
