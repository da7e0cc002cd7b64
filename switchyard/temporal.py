"""Talking to Temporal from a Switchyard process: the client (traced, so a saga's spans follow it from
the CLI into the workflow and each activity), the search attributes sagas set, and leaving cleanly.

Leaving cleanly: the Temporal client runs in native code with threads of its own. A call still under
way in them when Python finalizes — one given up on, or cut short by Ctrl-C — hangs the interpreter or
aborts it ("PyGILState_Release ... finalizing", temporalio/sdk-python issue 300). A process that used a
client therefore ends with :func:`leave`: output flushed, telemetry exported, then ``os._exit`` instead of
a finalization that can meet those threads.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from switchyard import telemetry
from switchyard.config import Config
from switchyard.errors import StackError
from switchyard.sagas.ids import KEYWORD_ATTRIBUTES, LIST_ATTRIBUTES

if TYPE_CHECKING:  # the SDK is imported by the commands that talk to Temporal, not by every command
    from temporalio.client import Client

log = logging.getLogger(__name__)
_used = False


async def connect(config: Config) -> Client:
    """A client of the configured namespace; raises StackError naming the address when it is not there."""
    from temporalio.client import Client
    from temporalio.contrib.opentelemetry import TracingInterceptor

    global _used  # noqa: PLW0603 - one flag per process, read by leave()
    _used = True
    try:
        return await Client.connect(
            config.temporal.address, namespace=config.temporal.namespace, interceptors=[TracingInterceptor()],
            data_converter=data_converter(),
        )  # fmt: skip
    except RuntimeError as exc:
        raise StackError(f"Temporal at {config.temporal.address} cannot be reached: {exc}") from exc


SAGA_OUTCOMES = ("SwitchRefused", "SwitchAbandoned", "MigrationAbandoned")
"""The failure types a saga ends with by its own decision (``workflows/base.py``): an outcome, not a crash."""


def data_converter() -> Any:
    """Temporal's default converter, but with step payloads decoded faster (:mod:`switchyard.payloads`),
    and a saga's own outcome reaches the Web UI as its reason and its result (the failure's message and
    details), without the workflow's Python stack trace or the chain of the step failures that led there —
    the ledger and the saga's steps have those."""
    import dataclasses

    from temporalio.api.failure.v1 import Failure
    from temporalio.converter import DataConverter, DefaultFailureConverter, PayloadConverter
    from temporalio.exceptions import ApplicationError

    from switchyard.payloads import SagaPayloads

    class SagaOutcomes(DefaultFailureConverter):
        def to_failure(
            self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
        ) -> None:
            super().to_failure(exception, payload_converter, failure)
            if isinstance(exception, ApplicationError) and exception.type in SAGA_OUTCOMES:
                failure.stack_trace = ""
                failure.ClearField("cause")

    return dataclasses.replace(
        DataConverter.default, payload_converter_class=SagaPayloads, failure_converter_class=SagaOutcomes
    )


async def register_search_attributes(client: Client) -> None:
    """Add the attributes sagas set, where they are missing (every worker does this at start)."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest

    namespace = client.namespace
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    known = set(listed.custom_attributes) | set(listed.system_attributes)
    wanted = {name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD for name in KEYWORD_ATTRIBUTES}
    wanted |= {name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST for name in LIST_ATTRIBUTES}
    missing = {name: kind for name, kind in wanted.items() if name not in known}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)
        )
        log.info("registered search attributes %s", ", ".join(sorted(missing)))


def leave(code: int) -> None:
    """End the process with ``code``; skip Python's finalization if a Temporal client was used."""
    if not _used:
        sys.exit(code)
    telemetry.shutdown()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)
