"""The configured policies, ready to match: each alert goes to the first policy, in the configuration's
order, whose labels it has (the way an Alertmanager route without ``continue`` takes an alert)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from switchyard.alerts.payloads import Alert
from switchyard.config import Config, WebhookPolicyConfig
from switchyard.keys import BindingKey
from switchyard.sagas.requests import ApprovalPoint, Kind


@dataclass(frozen=True)
class Policy:
    name: str
    kind: Kind
    match: Mapping[str, str]
    match_re: Mapping[str, re.Pattern[str]]
    keys: tuple[str, ...]
    """Explicit binding keys, each in its one text form; empty when ``cluster`` names them."""
    cluster: str | None
    target: str | None
    link: str | None
    approval: ApprovalPoint | None
    cooldown_s: float

    @classmethod
    def of(cls, config: WebhookPolicyConfig) -> Policy:
        return cls(
            name=config.name,
            kind=Kind(config.saga),
            match=dict(config.match),
            match_re={label: re.compile(pattern) for label, pattern in config.match_re.items()},
            keys=tuple(dict.fromkeys(str(BindingKey.parse(k)) for k in config.keys)),
            cluster=config.cluster,
            target=config.target,
            link=config.link,
            approval=ApprovalPoint(config.approval) if config.approval else None,
            cooldown_s=config.cooldown_s,
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items()) and all(
            p.fullmatch(labels.get(k, "")) for k, p in self.match_re.items()
        )


def policies_of(config: Config) -> list[Policy]:
    return [Policy.of(p) for p in config.webhook.policies]


def assign(
    policies: Iterable[Policy], alerts: Iterable[Alert]
) -> tuple[list[tuple[Policy, list[Alert]]], list[Alert]]:
    """The alerts each policy takes (policies in order, those taking none left out), and those no
    policy takes."""
    ordered = list(policies)
    taken: dict[str, list[Alert]] = {}
    unmatched: list[Alert] = []
    for alert in alerts:
        policy = next((p for p in ordered if p.matches(alert.labels)), None)
        if policy is None:
            unmatched.append(alert)
        else:
            taken.setdefault(policy.name, []).append(alert)
    return [(p, taken[p.name]) for p in ordered if p.name in taken], unmatched
