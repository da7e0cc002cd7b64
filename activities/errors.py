"""Switchyard's errors as Temporal sees them, decided in one place.

An error that retrying cannot mend — a refusal, a conflict with someone else's change, a broken
fence, a lock held by another saga, gateways that did not apply an epoch in time — fails the step at
once (``non_retryable``), so the saga decides (compensates) instead of retrying. Everything else
(ZooKeeper or a broker out of reach, the ledger busy) is left for Temporal to retry with backoff. The
error's class name is the failure's type, which is what workflows and operators match on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError

from switchyard.errors import (
    AcksTimeout,
    BindingConflict,
    BindingRefused,
    ConfigError,
    GatewayIdInUse,
    LockHeld,
    NoSuchTopic,
    SagaError,
    SwitchyardError,
)

NON_RETRYABLE: tuple[type[SwitchyardError], ...] = (
    AcksTimeout,
    BindingConflict,
    BindingRefused,
    ConfigError,
    GatewayIdInUse,
    LockHeld,
    NoSuchTopic,
    SagaError,
)


def to_temporal(exc: SwitchyardError) -> ApplicationError:
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=isinstance(exc, NON_RETRYABLE))


@contextmanager
def mapped() -> Iterator[None]:
    """Raise Switchyard's errors from the block as Temporal's: the message says what went wrong, so the
    failure carries no chain of causes with their stack traces (the worker's log has them). Temporal
    keeps a step's last failure with the time-out of a step that gave up, but only a small one: a large
    failure reaches the saga as "Failure exceeds size limit"."""
    try:
        yield
    except SwitchyardError as exc:
        raise to_temporal(exc) from None
