"""A saga's failures as an operator reads them: the activity's own error, not Temporal's wrapping.
Used by the sagas (in their results) and by the CLI (when a saga ends without the switch)."""

from __future__ import annotations

import asyncio

from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as StepTimeout


def error_type(exc: BaseException) -> str:
    """The type of the activity's own error (Switchyard's error class name), or ""."""
    cause: BaseException | None = exc
    while isinstance(cause, ActivityError | StepTimeout) and cause.cause is not None:
        cause = cause.cause
    return cause.type or "" if isinstance(cause, ApplicationError) else ""


def reason(exc: BaseException) -> str:
    """What went wrong, as an operator reads it: the activity's own error, not Temporal's wrapping; for a
    step that gave up, the time-out and the last attempt's error."""
    cause: BaseException | None = exc
    while isinstance(cause, ActivityError) and cause.cause is not None:
        cause = cause.cause
    if isinstance(cause, StepTimeout):
        kind = cause.type.name.lower().replace("_", "-") if cause.type is not None else "time-out"
        last = f": {reason(cause.cause)}" if cause.cause is not None else ""
        return f"gave up ({kind} time-out){last}"
    if isinstance(cause, ApplicationError):
        return f"{cause.type}: {cause.message}" if cause.type else cause.message
    if isinstance(cause, CancelledError | asyncio.CancelledError):
        return "cancelled"
    return str(cause) or type(cause).__name__
