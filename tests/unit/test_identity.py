from __future__ import annotations

import pytest

from switchyard.identity import Identity, identify


@pytest.mark.parametrize(
    ("sasl_user", "client_id", "expected"),
    [
        ("orders", "host-7", Identity("orders", instance="host-7")),
        ("orders", None, Identity("orders")),
        ("orders", "HA#orders#payments", Identity("orders", legacy_topic="payments")),
        ("orders", "HA#other#payments", Identity("orders", legacy_topic="payments")),  # auth wins
        (None, "orders@host-7", Identity("orders", instance="host-7")),
        (None, "orders", Identity("orders")),
        (None, "HA#orders#payments", Identity("orders", legacy_topic="payments")),
        (None, "HA#orders", Identity("HA#orders")),  # not a complete legacy form: a plain AppID
        (None, "", Identity("")),
        (None, None, Identity("")),
        (None, "@x", Identity("@x")),
    ],
)
def test_identify(sasl_user: str | None, client_id: str | None, expected: Identity) -> None:
    assert identify(sasl_user=sasl_user, client_id=client_id) == expected


def test_anonymous() -> None:
    assert identify(sasl_user=None, client_id=None).anonymous
    assert str(Identity("")) == "(anonymous)"
