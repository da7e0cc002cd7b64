"""SASL: PLAIN from clients, checked against the gateway's users file; PLAIN or SCRAM to the brokers.

The gateway terminates the client's SASL because it must know the AppID (the user name) before it
routes the first request, and the broker that would check the password is not chosen yet. The password
the client proved is kept with its connection, so the broker connections made for it authenticate as
the same user (brokers keep their own ACLs and quotas per user).

Users file: one ``name:pbkdf2-sha256:iterations:salt:hash`` line per user (salt and hash in base64),
written by ``switchyard gateway add-user``; the gateway re-reads it when it changes, so adding or
removing a user needs no restart. A successful check is remembered (keyed by a keyed hash of the
password, never the password) until the file changes, so a client's many connections cost one PBKDF2.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from workers.gateway.brokers.upstream import Ask
from workers.gateway.routing import apis

SCHEME = "pbkdf2-sha256"
ITERATIONS = 200_000
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class SaslError(Exception):
    """Authentication failed or was malformed; the message is safe to show the client."""


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str = field(repr=False)


def parse_plain(token: bytes) -> Credentials:
    """A PLAIN token (RFC 4616): ``authzid NUL user NUL password``."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        raise SaslError("a PLAIN token is authzid, user and password separated by NUL bytes")
    try:
        authzid, user, password = (p.decode() for p in parts)
    except UnicodeDecodeError as exc:
        raise SaslError("a PLAIN token must be UTF-8") from exc
    if not user:
        raise SaslError("the PLAIN user name is empty")
    if authzid and authzid != user:
        raise SaslError("acting as another user (authzid) is not allowed")
    return Credentials(user, password)


def plain_token(credentials: Credentials) -> bytes:
    return f"\0{credentials.user}\0{credentials.password}".encode()


def hash_password(password: str, *, iterations: int = ITERATIONS, salt: bytes | None = None) -> str:
    """The ``scheme:iterations:salt:hash`` part of a users-file line."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"{SCHEME}:{iterations}:{_b64(salt)}:{_b64(digest)}"


def user_line(user: str, password: str) -> str:
    if not user or ":" in user or "\n" in user:
        raise ValueError("a user name must be non-empty, without ':' or line breaks")
    return f"{user}:{hash_password(password)}"


class UsersFile:
    """The users who may authenticate to the gateway; :meth:`verify` blocks (PBKDF2), call it in a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, tuple[int, bytes, bytes]] = {}
        self._verified: set[tuple[str, bytes]] = set()
        self._key = secrets.token_bytes(32)

    def load(self) -> None:
        """Read the file if it changed; raise :class:`SaslError` naming the problem."""
        with self._lock:
            self._reload()

    def verify(self, credentials: Credentials) -> bool:
        with self._lock:
            self._reload()
            entry = self._users.get(credentials.user)
            remembered = (credentials.user, hmac.digest(self._key, credentials.password.encode(), "sha256"))
            if remembered in self._verified:
                return True
        if entry is None:
            return False
        iterations, salt, expected = entry
        digest = hashlib.pbkdf2_hmac("sha256", credentials.password.encode(), salt, iterations)
        if not hmac.compare_digest(digest, expected):
            return False
        with self._lock:
            self._verified.add(remembered)
        return True

    def _reload(self) -> None:
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise SaslError(f"users file {self.path} cannot be read: {exc.strerror}") from exc
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        users = {}
        for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            try:
                user, scheme, iterations, salt, digest = line.rsplit(":", 4)
                if scheme != SCHEME:
                    raise ValueError(f"unknown scheme {scheme!r}")
                users[user] = (int(iterations), base64.b64decode(salt), base64.b64decode(digest))
            except ValueError as exc:
                raise SaslError(f"users file {self.path} line {number} is malformed: {exc}") from exc
        self._users, self._verified, self._stamp = users, set(), stamp


async def authenticate(ask: Ask, *, mechanism: str, credentials: Credentials) -> None:
    """Log a broker connection in as ``credentials`` (an :data:`~workers.gateway.brokers.upstream.Login`)."""
    handshake = await ask(apis.SASL_HANDSHAKE, 1, mechanism=mechanism)
    if handshake.error_code != ErrorCode.none:
        offered = ", ".join(handshake.mechanisms or ()) or "none"
        raise SaslError(f"the broker does not offer {mechanism} (it offers {offered})")
    if mechanism == "PLAIN":
        await _step(ask, plain_token(credentials))
        return
    scram = ScramClient(mechanism, credentials)
    server_first = await _step(ask, scram.first())
    scram.check(await _step(ask, scram.final(server_first)))


async def _step(ask: Ask, token: bytes) -> bytes:
    answer = await ask(apis.SASL_AUTHENTICATE, 1, auth_bytes=token)
    if answer.error_code != ErrorCode.none:
        raise SaslError(f"{answer.error_code.name}: {answer.error_message or 'no reason given'}")
    return bytes(answer.auth_bytes)


class ScramClient:
    """The client side of SCRAM (RFC 5802, RFC 7677): first message, final message, server check."""

    def __init__(self, mechanism: str, credentials: Credentials, *, nonce: str | None = None) -> None:
        self.hash = SCRAM_HASHES[mechanism]
        self.credentials = credentials
        self.nonce = nonce or _b64(secrets.token_bytes(24))
        name = credentials.user.replace("=", "=3D").replace(",", "=2C")
        self._bare = f"n={name},r={self.nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attributes(text)
        if "e" in attrs:
            raise SaslError(f"the broker refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self.nonce) or salt is None or not iterations.isdigit():
            raise SaslError(f"unexpected SCRAM server-first message {text!r}")
        salted = hashlib.pbkdf2_hmac(
            self.hash, self.credentials.password.encode(), base64.b64decode(salt), int(iterations)
        )
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        without_proof = f"c=biws,r={nonce}"
        message = f"{self._bare},{text},{without_proof}".encode()
        signature = hmac.digest(hashlib.new(self.hash, client_key).digest(), message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self._server_signature = hmac.digest(server_key, message, self.hash)
        return f"{without_proof},p={_b64(proof)}".encode()

    def check(self, server_final: bytes) -> None:
        attrs = _attributes(server_final.decode())
        if "e" in attrs:
            raise SaslError(f"the broker refused: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self._server_signature):
            raise SaslError("the broker's SCRAM signature is wrong: it does not know this password")


def _attributes(message: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in message.split(",") if "=" in part)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
