"""SASL pieces that are pure logic: PLAIN tokens, the users file, and the SCRAM client's arithmetic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workers.gateway.framing.sasl import (
    Credentials,
    SaslError,
    ScramClient,
    UsersFile,
    parse_plain,
    user_line,
)


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        (b"\0orders\0pw", Credentials("orders", "pw")),
        (b"orders\0orders\0pw", Credentials("orders", "pw")),
        (b"\0\xc3\xa9t\xc3\xa9\0p\0", None),  # a NUL inside the password makes four parts
        (b"\0\xc3\xa9t\xc3\xa9\0", Credentials("\u00e9t\u00e9", "")),
    ],
)
def test_plain_tokens(token: bytes, expected: Credentials | None) -> None:
    if expected is None:
        with pytest.raises(SaslError, match="separated by NUL"):
            parse_plain(token)
    else:
        assert parse_plain(token) == expected


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (b"orders:pw", "separated by NUL"),
        (b"\0\0pw", "user name is empty"),
        (b"admin\0orders\0pw", "another user"),
        (b"\0\xff\0pw", "UTF-8"),
    ],
)
def test_bad_plain_tokens_are_named(token: bytes, reason: str) -> None:
    with pytest.raises(SaslError, match=reason):
        parse_plain(token)


def test_users_file_checks_passwords_and_follows_changes(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"# comment\n{user_line('orders', 'pw-1')}\n{user_line('billing', 'pw-2')}\n")
    users = UsersFile(path)
    assert users.verify(Credentials("orders", "pw-1"))
    assert users.verify(Credentials("orders", "pw-1"))  # remembered
    assert not users.verify(Credentials("orders", "pw-2"))
    assert not users.verify(Credentials("nobody", "pw-1"))
    assert users.verify(Credentials("billing", "pw-2"))

    path.write_text(f"{user_line('orders', 'new password')}\n")
    os.utime(path, ns=(1, 1))  # a different stamp even within one clock tick
    assert not users.verify(Credentials("orders", "pw-1")), "a remembered password outlived its change"
    assert not users.verify(Credentials("billing", "pw-2")), "a removed user still logs in"
    assert users.verify(Credentials("orders", "new password"))


def test_a_malformed_users_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"{user_line('orders', 'pw')}\nbilling:md5:abc\n")
    with pytest.raises(SaslError, match="line 2 is malformed"):
        UsersFile(path).load()
    with pytest.raises(SaslError, match="cannot be read"):
        UsersFile(tmp_path / "missing").load()


def test_user_names_that_would_break_the_file_are_refused() -> None:
    for name in ("", "a:b", "a\nb"):
        with pytest.raises(ValueError, match="user name"):
            user_line(name, "pw")


def test_scram_sha_256_matches_rfc_7677() -> None:
    """The exchange printed in RFC 7677, section 3 (user "user", password "pencil")."""
    client = ScramClient("SCRAM-SHA-256", Credentials("user", "pencil"), nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert client.final(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.check(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError, match="signature is wrong"):
        client.check(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_scram_refusals_are_named() -> None:
    client = ScramClient("SCRAM-SHA-512", Credentials("user", "pencil"), nonce="abc")
    with pytest.raises(SaslError, match="unknown-user"):
        client.final(b"e=unknown-user")
    with pytest.raises(SaslError, match="server-first"):
        client.final(b"r=someone-elses-nonce,s=AAAA,i=4096")
    client.final(b"r=abcdef,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=16")
    with pytest.raises(SaslError, match="unknown-user"):
        client.check(b"e=unknown-user")  # what Tansu answers in the final step
