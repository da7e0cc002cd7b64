"""What a notification does: the sagas it starts or rejects, decided per policy, idempotently.

::

    notification ──▶ the same as the last one of its alert group? ── yes ──▶ report what that one did,
          │                                                                   as it stands now; start nothing
          ▼ no
    each alert to the first policy it matches
          ├─ a policy with a firing alert: start its saga on its keys, unless a saga runs on them
          │  ("already running") or one ended less than the cool-down ago ("cooling down")
          └─ a policy whose alerts all resolved: reject the saga this alert group started if it still
             waits for an approval ("rejected"), else "nothing to do"

Alertmanager re-sends a notification until it gets a 2xx, repeats it every ``repeat_interval`` while the
alert fires, and an HA pair delivers each one twice (the copies differ only in ``externalURL``). So a
notification is known by its group key, status and each alert's fingerprint and status — never by its
body — and is acted on once; the saga id comes from the keys (:func:`~switchyard.sagas.ids.saga_id`), so
even a receiver that forgot (restarted, or a second replica) starts no second saga on them while one runs.
A saga rejected because its alert resolved does not cool down: the alert firing again starts a fresh one.

The sagas are behind :class:`SagaPort` (Temporal in the receiver, memory in tests) and a cluster's keys
behind :class:`KeySource` (ZooKeeper).

Error handling: a port or key source that cannot reach its service raises
:class:`~switchyard.errors.StackError` (Temporal) or :class:`~switchyard.errors.RoutingError`
(ZooKeeper); it propagates (the receiver answers 503, so the sender tries again), and the notification is
not remembered, so the retry is handled afresh — what the first attempt started is then "already running".
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from switchyard.alerts.payloads import Alert, Notification
from switchyard.alerts.policies import Policy, assign, policies_of
from switchyard.config import Config
from switchyard.errors import RoutingError, StackError
from switchyard.launch import policy_of
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Decision, Kind, SwitchRequest

log = logging.getLogger(__name__)

UNAVAILABLE: tuple[type[Exception], ...] = (StackError, RoutingError)
"""What a port raises when Temporal or ZooKeeper cannot be reached: the answer is 503."""
RESOLVED_BEFORE_APPROVAL = "the alert resolved before the approval"
"""Starts the reason of every rejection the receiver sends; a saga rejected so does not cool down."""
MEMO_KEY = "alert"
MEMO_FINGERPRINTS = 200
"""A saga's memo names at most this many of the notification's alerts (it counts them all)."""
REMEMBERED = 10_000
"""Alert groups remembered at most (the least recently notified are forgotten first)."""


class Outcome(StrEnum):
    STARTED = "started"
    ALREADY_RUNNING = "already running"
    COOLING_DOWN = "cooling down"
    NO_POLICY = "no policy matched"
    REJECTED = "rejected"
    NOTHING = "nothing to do"


class PolicyResult(BaseModel):
    """What one policy did with the alerts it took."""

    model_config = ConfigDict(frozen=True)

    policy: str | None
    """None for the alerts no policy took."""
    outcome: Outcome
    alerts: list[str] = Field(default_factory=list)
    """The fingerprints of the alerts the policy took."""
    saga: str | None = None
    """The saga started, found running or cooling down, or rejected."""
    kind: str | None = None
    keys: list[str] = Field(default_factory=list)
    detail: str = ""


class Answer(BaseModel):
    """The answer to a notification that was handled (HTTP 200)."""

    model_config = ConfigDict(frozen=True)

    source: str
    group_key: str
    status: str
    repeat: bool = False
    """The notification is a copy or repeat of the last one of its group: nothing was started or
    rejected for it; ``results`` say where the sagas of the first one are now."""
    results: list[PolicyResult]


@dataclass(frozen=True)
class SagaState:
    """A saga as Temporal knows it (its newest run)."""

    saga_id: str
    status: str
    """running, completed, failed, canceled, terminated, timed_out, ..."""
    closed_at: datetime | None = None
    awaiting_approval: str | None = None
    """Where a running saga waits for an approval (its ``progress`` query), if it does."""
    memo: Mapping[str, Any] = field(default_factory=dict)
    approvals: tuple[str, ...] = ()
    """An ended saga's approvals and rejections, as its result lists them."""

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def rejected_on_resolve(self) -> bool:
        return any(a.startswith("rejected") and RESOLVED_BEFORE_APPROVAL in a for a in self.approvals)


class SagaPort(Protocol):
    """The sagas, as the receiver needs them."""

    async def start(self, kind: Kind, saga: str, request: SwitchRequest, memo: Mapping[str, Any]) -> bool:
        """Start the saga; False when one already runs under the id."""

    async def state(self, saga: str) -> SagaState | None:
        """The saga's newest run; None when there never was one."""

    async def reject(self, saga: str, decision: Decision) -> bool:
        """Send the ``reject`` update; False when the saga no longer waits for a decision."""

    async def ready(self) -> None:
        """Return when the sagas' service answers; raise StackError naming it otherwise."""


class KeySource(Protocol):
    async def keys_on(self, cluster: str) -> list[str]:
        """Every binding key bound to ``cluster`` now, blocked ones included."""


@dataclass(frozen=True)
class _Remembered:
    identity: str
    at: datetime
    results: list[PolicyResult]
    sagas: frozenset[str]
    """Every saga a notification of this group started (for its resolution)."""


@dataclass
class _Lock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class Dispatcher:
    """Handles notifications one alert group at a time (an HA pair's copies arrive together)."""

    def __init__(
        self,
        config: Config,
        sagas: SagaPort,
        keys: KeySource,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.sagas = sagas
        self.keys = keys
        self.policies = policies_of(config)
        self._clock = clock
        self._window = timedelta(seconds=config.webhook.dedup_window_s)
        self._recent: OrderedDict[tuple[str, str, str], _Remembered] = OrderedDict()
        self._locks: dict[tuple[str, str, str], _Lock] = {}

    async def handle(self, notification: Notification) -> Answer:
        async with self._group(notification.scope):
            now = self._clock()
            last = self._remembered(notification.scope, now)
            if last is not None and last.identity == notification.identity:
                results = [await self._again(r, last.at, now) for r in last.results]
                answer = self._answer(notification, results, repeat=True)
            else:
                known = last.sagas if last is not None else frozenset()
                results = await self._evaluate(notification, known, now)
                started = {r.saga for r in results if r.outcome is Outcome.STARTED and r.saga}
                self._remember(notification, results, known | started, now)
                answer = self._answer(notification, results, repeat=False)
        log.info(
            "%s %r %s%s: %s", notification.source, notification.group_key, notification.status,
            " (repeat)" if answer.repeat else "",
            "; ".join(f"{r.policy or '-'}: {r.outcome} {r.saga or ''}".rstrip() for r in answer.results),
        )  # fmt: skip
        return answer

    # ---- a new notification

    async def _evaluate(
        self, notification: Notification, known: frozenset[str], now: datetime
    ) -> list[PolicyResult]:
        taken, unmatched = assign(self.policies, notification.alerts)
        results = []
        for policy, alerts in taken:
            firing = [a for a in alerts if a.status == "firing"]
            if firing:
                results.append(await self._fire(notification, policy, firing, now))
            else:
                results.append(await self._resolve(notification, policy, alerts, known))
        if unmatched or not taken:
            names = ", ".join(sorted({a.name for a in unmatched})) or "(no alerts)"
            fingerprints = [a.fingerprint for a in unmatched]
            detail = f"no policy matches {names}"
            results.append(
                PolicyResult(policy=None, outcome=Outcome.NO_POLICY, alerts=fingerprints, detail=detail)
            )
        return results

    async def _fire(
        self, notification: Notification, policy: Policy, alerts: list[Alert], now: datetime
    ) -> PolicyResult:
        base = {"policy": policy.name, "alerts": [a.fingerprint for a in alerts], "kind": str(policy.kind)}
        keys = await self._keys_of(policy)
        if not keys:
            return PolicyResult(
                **base, outcome=Outcome.NOTHING, detail=f"no binding key is bound to cluster {policy.cluster}"
            )
        saga = saga_id(keys)
        base |= {"saga": saga, "keys": keys}
        state = await self.sagas.state(saga)
        if state is not None and state.running:
            return PolicyResult(
                **base,
                outcome=Outcome.ALREADY_RUNNING,
                detail=f"saga {saga} is already running on these keys",
            )
        cooling = self._cooling(state, policy, now)
        if cooling:
            return PolicyResult(**base, outcome=Outcome.COOLING_DOWN, detail=cooling)
        reason = _reason(notification, policy, alerts)
        request = SwitchRequest(
            list(keys),
            target=policy.target,
            link=policy.link,
            source=policy.cluster if policy.kind is Kind.FAILOVER else None,
            actor=notification.actor,
            reason=reason,
            policy=policy_of(self.config, policy.kind, approval=policy.approval),
        )
        memo = {
            MEMO_KEY: {
                "source": notification.source,
                "actor": notification.actor,
                "group_key": notification.group_key,
                "status": notification.status,
                "fingerprints": sorted(a.fingerprint for a in notification.alerts)[:MEMO_FINGERPRINTS],
                "alerts": len(notification.alerts),
                "alertnames": sorted({a.name for a in alerts}),
                "policy": policy.name,
                "keys": list(keys),
            }
        }
        if not await self.sagas.start(policy.kind, saga, request, memo):
            return PolicyResult(
                **base, outcome=Outcome.ALREADY_RUNNING,
                detail=f"saga {saga} was started on these keys a moment ago by someone else",
            )  # fmt: skip
        return PolicyResult(**base, outcome=Outcome.STARTED, detail=f"{policy.kind} {saga} started: {reason}")

    def _cooling(self, state: SagaState | None, policy: Policy, now: datetime) -> str:
        """Why no saga may start on the keys yet, or "" when one may."""
        if state is None or state.closed_at is None or state.rejected_on_resolve:
            return ""
        until = state.closed_at + timedelta(seconds=policy.cooldown_s)
        if now >= until:
            return ""
        ended = state.closed_at.isoformat(timespec="seconds")
        return (
            f"saga {state.saga_id} ended ({state.status}) at {ended}; "
            f"policy {policy.name} starts none on these keys before {until.isoformat(timespec='seconds')}"
        )

    async def _resolve(
        self, notification: Notification, policy: Policy, alerts: list[Alert], known: frozenset[str]
    ) -> PolicyResult:
        base = {"policy": policy.name, "alerts": [a.fingerprint for a in alerts], "kind": str(policy.kind)}
        candidates = set(known)
        if policy.keys:
            candidates.add(saga_id(list(policy.keys)))
        elif not candidates and policy.cluster is not None:
            keys = await self._keys_of(policy)
            if keys:
                candidates.add(saga_id(keys))
        why = ["no saga this alert group started is running"]
        for saga in sorted(candidates):
            state = await self.sagas.state(saga)
            if state is None or not state.running:
                continue
            memo = state.memo.get(MEMO_KEY)
            started_by = memo if isinstance(memo, Mapping) else {}  # another shape: not one of ours
            if started_by.get("group_key") != notification.group_key or started_by.get("actor") != (
                notification.actor
            ):
                why.append(f"saga {saga} runs on the keys, but this alert group did not start it")
                continue
            if state.awaiting_approval is None:
                why.append(f"saga {saga} is not waiting for an approval")
                continue
            names = ", ".join(sorted({a.name for a in alerts}))
            decision = Decision(
                notification.actor,
                f"{RESOLVED_BEFORE_APPROVAL}: {names} ({notification.source} group {notification.group_key})",
            )
            if await self.sagas.reject(saga, decision):
                return PolicyResult(
                    **base, outcome=Outcome.REJECTED, saga=saga, keys=list(started_by.get("keys") or []),
                    detail=f"saga {saga} waited for an approval {state.awaiting_approval}: {decision.reason}",
                )  # fmt: skip
            why.append(f"saga {saga} stopped waiting for an approval before the rejection arrived")
        return PolicyResult(**base, outcome=Outcome.NOTHING, detail=why[-1])

    async def _keys_of(self, policy: Policy) -> list[str]:
        if policy.keys:
            return list(policy.keys)
        assert policy.cluster is not None  # the configuration requires one of them
        return sorted(dict.fromkeys(await self.keys.keys_on(policy.cluster)))

    # ---- a repeat

    async def _again(self, result: PolicyResult, first: datetime, now: datetime) -> PolicyResult:
        """The result of a repeated notification: where the saga the first one acted on is now."""
        handled = f"repeat of the notification handled at {first.isoformat(timespec='seconds')}"
        if result.saga is None or result.outcome in (Outcome.NOTHING, Outcome.NO_POLICY):
            return result.model_copy(update={"detail": f"{handled}: {result.detail}"})
        if result.outcome is Outcome.REJECTED:
            return result.model_copy(
                update={"outcome": Outcome.NOTHING, "detail": f"{handled}, which rejected saga {result.saga}"}
            )
        state = await self.sagas.state(result.saga)
        if state is not None and state.running:
            return result.model_copy(
                update={"outcome": Outcome.ALREADY_RUNNING, "detail": f"{handled}: saga {result.saga} runs"}
            )
        policy = next((p for p in self.policies if p.name == result.policy), None)
        cooling = self._cooling(state, policy, now) if policy is not None else ""
        if cooling:
            return result.model_copy(
                update={"outcome": Outcome.COOLING_DOWN, "detail": f"{handled}: {cooling}"}
            )
        ended = (
            f"saga {result.saga} ended ({state.status})" if state is not None else f"no saga {result.saga}"
        )
        return result.model_copy(update={"outcome": Outcome.NOTHING, "detail": f"{handled}; {ended}"})

    # ---- memory

    def _remembered(self, scope: tuple[str, str, str], now: datetime) -> _Remembered | None:
        last = self._recent.get(scope)
        if last is None or now - last.at > self._window:
            return None
        return last

    def _remember(
        self, notification: Notification, results: list[PolicyResult], sagas: frozenset[str], now: datetime
    ) -> None:
        self._recent[notification.scope] = _Remembered(notification.identity, now, results, sagas)
        self._recent.move_to_end(notification.scope)
        while len(self._recent) > REMEMBERED:
            self._recent.popitem(last=False)

    @asynccontextmanager
    async def _group(self, scope: tuple[str, str, str]) -> AsyncIterator[None]:
        """One notification of an alert group at a time; the lock goes when nobody holds or awaits it."""
        entry = self._locks.setdefault(scope, _Lock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if not entry.users:
                del self._locks[scope]

    @staticmethod
    def _answer(notification: Notification, results: Sequence[PolicyResult], *, repeat: bool) -> Answer:
        return Answer(
            source=notification.source,
            group_key=notification.group_key,
            status=notification.status,
            repeat=repeat,
            results=list(results),
        )


def _reason(notification: Notification, policy: Policy, alerts: list[Alert]) -> str:
    """The saga's reason: which alert, from where, and its summary."""
    names = ", ".join(sorted({a.name for a in alerts}))
    first = alerts[0].annotations
    summary = first.get("summary") or first.get("description") or ""
    text = (
        f"{notification.source} alert {names} firing (policy {policy.name}, group {notification.group_key})"
    )
    text += f": {summary}" if summary else ""
    return text if len(text) <= 500 else text[:497] + "..."
