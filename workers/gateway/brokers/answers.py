"""The answers the gateway gives itself, whatever cluster a client is bound to: the API versions it
offers, and the SASL login (PLAIN, checked against the gateway's own users file)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import API_VERSIONS, Request, response_schema
from workers.gateway.brokers.directory import LOCAL_APIS, BrokerDirectory
from workers.gateway.framing.sasl import Credentials, SaslError, UsersFile, parse_plain

log = logging.getLogger(__name__)


class LocalAnswers:
    def __init__(self, brokers: BrokerDirectory, users: UsersFile | None, gateway_id: str) -> None:
        self.brokers = brokers
        self.users = users
        self._id = gateway_id

    def api_versions_response(self, request: Request) -> Any:
        """The APIs and versions offered; a too-new request gets UNSUPPORTED_VERSION in the v0 form."""
        supported = request.api_version <= LOCAL_APIS[API_VERSIONS][1]
        cls = response_schema(API_VERSIONS, request.api_version if supported else 0)
        entry = element_type(cls, "api_keys")
        keys = tuple(
            make(entry, api_key=k, min_version=low, max_version=high)
            for k, (low, high) in sorted(self.brokers.offered.items())
        )
        error = ErrorCode.none if supported else ErrorCode.unsupported_version
        if not supported or request.api_version < 3:
            return make(cls, error_code=error, api_keys=keys)
        features = sorted(self.brokers.features.items())
        return make(
            cls, error_code=error, api_keys=keys, finalized_features_epoch=1 if features else -1,
            supported_features=tuple(
                make(element_type(cls, "supported_features"), name=n, min_version=1, max_version=level)
                for n, level in features
            ),
            finalized_features=tuple(
                make(element_type(cls, "finalized_features"), name=n, min_version_level=level,
                     max_version_level=level)
                for n, level in features
            ),
        )  # fmt: skip

    def sasl_handshake(self, request: Request, *, authenticated: bool) -> Any:
        """Accept PLAIN, the one mechanism offered; a second login on one connection is refused."""
        cls = response_schema(request.api_key, request.api_version)
        if self.users is None:
            return make(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=())
        if authenticated:
            return make(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=("PLAIN",))
        ok = request.api_version >= 1 and request.body.mechanism == "PLAIN"  # v0 means unframed tokens
        error = ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism
        return make(cls, error_code=error, mechanisms=("PLAIN",))

    async def sasl_authenticate(
        self, request: Request, *, handshaken: bool
    ) -> tuple[Any, Credentials | None]:
        """The answer to a PLAIN token, and the credentials it proved (None: refused, close after)."""
        cls = response_schema(request.api_key, request.api_version)
        if self.users is None or not handshaken:
            return make(cls, error_code=ErrorCode.illegal_sasl_state, error_message="no SASL handshake"), None
        refused = "authentication failed: unknown user or wrong password"
        try:
            credentials = parse_plain(request.body.auth_bytes)
            known = await asyncio.to_thread(self.users.verify, credentials)
        except SaslError as exc:
            log.warning("gateway %s: SASL refused: %s", self._id, exc)
            refused, known = f"authentication failed: {exc}", False
        if not known:
            return make(cls, error_code=ErrorCode.sasl_authentication_failed, error_message=refused), None
        return make(cls, error_code=ErrorCode.none, auth_bytes=b""), credentials
