"""Who may send notifications: Alertmanager by bearer token or basic auth, Grafana by an HMAC-SHA256
signature of the body (``<timestamp>:<body>`` when the contact point sends a timestamp, so a recorded
notification cannot be replayed later).

Secrets come from a file or an environment variable named in the configuration, are read once when the
receiver starts, and live only in :class:`Secret`, which neither prints nor logs them. Every comparison
is constant-time (:func:`hmac.compare_digest`).

Error handling: a request that does not authenticate raises :class:`AuthFailed`, whose reason names
what failed (the header, "signature does not match", "timestamp ... is stale") and never a secret; a
secret that cannot be read at start raises :class:`~switchyard.errors.ConfigError` naming its key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from switchyard.config import Config
from switchyard.errors import ConfigError

Source = Literal["alertmanager", "grafana"]


class Secret:
    """A secret's bytes, kept out of every repr, str and log line."""

    __slots__ = ("_value",)

    def __init__(self, value: bytes) -> None:
        self._value = value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def matches(self, given: bytes) -> bool:
        return hmac.compare_digest(self._value, given)

    def sign(self, message: bytes) -> str:
        """HMAC-SHA256 of ``message``, hex."""
        return hmac.new(self._value, message, hashlib.sha256).hexdigest()


class AuthFailed(Exception):
    """The request did not authenticate; the reason says which check failed."""

    def __init__(self, reason: str, challenge: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.challenge = challenge
        """The ``WWW-Authenticate`` value to answer with, when the scheme has one."""


class Authenticator(Protocol):
    def check(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        """Return if the request may be handled; raise AuthFailed otherwise. ``headers`` must look names
        up regardless of case (as an HTTP framework's headers do); ``now`` is Unix time."""


@dataclass(frozen=True)
class AlertmanagerAuth:
    """Bearer token or basic auth (either, when both are configured); neither: anyone (``insecure``)."""

    bearer: Secret | None = None
    basic: tuple[bytes, Secret] | None = None

    @property
    def _challenge(self) -> str:
        return 'Basic realm="switchyard"' if self.bearer is None else 'Bearer realm="switchyard"'

    def check(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        if self.bearer is None and self.basic is None:
            return
        header = headers.get("authorization")
        if not header:
            raise AuthFailed("missing header Authorization", self._challenge)
        scheme, _, credentials = header.strip().partition(" ")
        given = credentials.strip().encode("latin-1", "replace")
        if scheme.lower() == "bearer" and self.bearer is not None:
            if self.bearer.matches(given):
                return
            raise AuthFailed("header Authorization: the bearer token does not match", self._challenge)
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                user, sep, password = base64.b64decode(given, validate=True).partition(b":")
            except binascii.Error:
                raise AuthFailed(
                    "header Authorization: basic credentials are not base64 of user:password", self._challenge
                ) from None
            username, secret = self.basic
            same_user = hmac.compare_digest(user, username)
            if secret.matches(password) and same_user and sep:
                return
            raise AuthFailed("header Authorization: the basic credentials do not match", self._challenge)
        accepted = " or ".join(n for n, v in (("Bearer", self.bearer), ("Basic", self.basic)) if v)
        raise AuthFailed(
            f"header Authorization: scheme {scheme[:20]!r} is not accepted (expected {accepted})",
            self._challenge,
        )


@dataclass(frozen=True)
class GrafanaAuth:
    """The contact point's HMAC signature; no secret: anyone (``insecure``)."""

    secret: Secret | None
    signature_header: str = "X-Grafana-Alerting-Signature"
    timestamp_header: str | None = None
    max_skew_s: float = 300.0

    def check(self, headers: Mapping[str, str], body: bytes, now: float) -> None:
        if self.secret is None:
            return
        given = headers.get(self.signature_header)
        if not given:
            raise AuthFailed(f"missing header {self.signature_header}")
        signed = body
        stamp = ""
        if self.timestamp_header is not None:
            stamp = headers.get(self.timestamp_header) or ""
            if not stamp:
                raise AuthFailed(f"missing header {self.timestamp_header}")
            signed = stamp.encode("latin-1", "replace") + b":" + body
        expected = self.secret.sign(signed).encode()
        if not hmac.compare_digest(expected, given.strip().lower().encode("latin-1", "replace")):
            raise AuthFailed(f"header {self.signature_header}: signature does not match")
        if self.timestamp_header is not None:
            if not re.fullmatch(r"\d{1,12}", stamp.strip()):  # seconds; a float of a huge one overflows
                raise AuthFailed(f"header {self.timestamp_header}: not a Unix timestamp")
            sent = int(stamp.strip())
            if abs(now - sent) > self.max_skew_s:
                raise AuthFailed(
                    f"header {self.timestamp_header}: timestamp {sent} is stale ({abs(now - sent):.0f}s from "
                    f"now; webhook.grafana.max_skew_s allows {self.max_skew_s:g}s)"
                )


def authenticators(config: Config, environ: Mapping[str, str] | None = None) -> dict[Source, Authenticator]:
    """One per configured receiver, with its secrets read; ConfigError naming the key of one that
    cannot be read. Relative secret files are taken relative to the configuration file."""
    env = os.environ if environ is None else environ
    base = config.source.parent if config.source is not None else Path.cwd()

    def read(key: str, what: str, section: object) -> Secret:
        file, name = getattr(section, f"{what}_file"), getattr(section, f"{what}_env")
        return read_secret(key, what, file=file, env_name=name, base=base, environ=env)

    found: dict[Source, Authenticator] = {}
    am = config.webhook.alertmanager
    if am is not None:
        bearer = read("webhook.alertmanager.bearer", "token", am.bearer) if am.bearer else None
        basic = None
        if am.basic is not None:
            basic = (am.basic.username.encode(), read("webhook.alertmanager.basic", "password", am.basic))
        found["alertmanager"] = AlertmanagerAuth(bearer, basic)
    grafana = config.webhook.grafana
    if grafana is not None:
        signed = grafana.secret_file is not None or grafana.secret_env is not None
        secret = read("webhook.grafana", "secret", grafana) if signed else None
        found["grafana"] = GrafanaAuth(
            secret, grafana.signature_header, grafana.timestamp_header, grafana.max_skew_s
        )
    return found


def read_secret(
    key: str, what: str, *, file: Path | None, env_name: str | None, base: Path, environ: Mapping[str, str]
) -> Secret:
    """The secret from ``<key>.<what>_file`` or ``<key>.<what>_env``, surrounding white space removed
    (as Alertmanager does with its ``credentials_file``)."""
    if file is not None:
        path = base / file
        try:
            value = path.read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"{key}.{what}_file: cannot read {path}: {exc.strerror}") from None
        if not value:
            raise ConfigError(f"{key}.{what}_file: {path} is empty")
        return Secret(value)
    if env_name is None:
        raise ConfigError(f"{key}: needs {what}_file or {what}_env")
    text = environ.get(env_name, "").strip()
    if not text:
        raise ConfigError(f"{key}.{what}_env: ${env_name} is not set or empty")
    return Secret(text.encode())
