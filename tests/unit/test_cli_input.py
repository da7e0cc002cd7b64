"""Every command that takes binding keys refuses the same bad keys with the same message and exit code 2
(issue 19, item 4), before it reads a configuration or reaches any service; saga ids and the cluster and
link names of saga commands too. Bytes that are not UTF-8 are refused, never decoded into a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from switchyard.cli import cli

BAD_KEYS = {
    "empty": ("", "bad binding key '': the AppID is empty"),
    "control character": ("ord\x07ers", r"the AppID 'ord\x07ers' has an invisible character '\x07' at 3"),
    "line break": ("ord\ners", r"the AppID 'ord\ners' has an invisible character '\n' at 3"),
    "line break in a name": ("orders@host\n1", r"the instance name 'host\n1' has an invisible character"),
    "not UTF-8": ("ord\udcffers", r"b'ord\xffers' is not valid UTF-8"),  # how Python hands over byte 0xff
}
KEY_COMMANDS = {
    "switchover": (["switchover"], "KEYS..."),
    "switchover --dry-run": (["switchover", "--dry-run"], "KEYS..."),
    "switchback": (["switchback"], "KEYS..."),
    "switchback --dry-run": (["switchback", "--dry-run"], "KEYS..."),
    "failover": (["failover"], "KEYS..."),
    "sagas unlock": (["sagas", "unlock"], "KEYS..."),
    "bindings set": (["bindings", "set", "--state", "active"], "KEY"),
    "bindings get": (["bindings", "get"], "KEY"),
    "bindings history": (["bindings", "history"], "[KEY]"),
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--config", "/nonexistent/switchyard.yaml", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return result.exit_code, result.output


@pytest.mark.parametrize("command", KEY_COMMANDS)
@pytest.mark.parametrize("bad", BAD_KEYS)
def test_every_command_that_takes_keys_refuses_a_bad_one_alike(command: str, bad: str) -> None:
    words, param = KEY_COMMANDS[command]
    key, why = BAD_KEYS[bad]
    after = ["primary"] if command == "bindings set" else []
    code, out = invoke(*words, "orders", key, *after) if param == "KEYS..." else invoke(*words, key, *after)
    assert code == 2, out
    assert f"Error: Invalid value for '{param}': {why}" in out, out


@pytest.mark.parametrize("command", ["show", "approve", "reject", "cancel"])
@pytest.mark.parametrize(
    ("saga", "why"),
    [
        ("", "the saga id is empty (switchyard sagas list)"),
        ("switchyard:a\udcff", r"b'switchyard:a\xff' is not valid UTF-8"),
    ],
)
def test_saga_commands_refuse_an_id_that_names_no_saga(command: str, saga: str, why: str) -> None:
    code, out = invoke("sagas", command, saga)
    assert code == 2, out
    assert f"Error: Invalid value for 'SAGA': {why}" in out, out


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (
            ["switchover", "orders", "--link", "p2s\udcff"],
            r"Invalid value for '--link': b'p2s\xff' is not valid UTF-8",
        ),
        (["switchback", "orders", "--to", ""], "Invalid value for '--to': the cluster id is empty"),
        (["migrate-topic", "pay\udcffments", "--to", "standby"], r"b'pay\xffments' is not valid UTF-8"),
        (["migrate-topic", "payments", "--to", " standby"], "the cluster id ' standby' begins or ends"),
        (
            ["failover", "orders", "--from", "pri\nmary"],
            r"Invalid value for '--from': the cluster id 'pri\nmary' has",
        ),
    ],
)
def test_saga_commands_refuse_cluster_and_link_names_no_cluster_or_link_can_have(
    args: list[str], why: str
) -> None:
    code, out = invoke(*args)
    assert code == 2, out
    assert why in out, out


@pytest.mark.parametrize(
    "command", [["switchover"], ["switchback", "--dry-run"], ["failover"], ["bindings", "set"]]
)
def test_bytes_that_are_not_utf8_on_the_command_line_are_refused_without_a_traceback(
    command: list[str],
) -> None:
    argv: list[str | bytes] = [sys.executable, "-m", "switchyard", "--config", "/nonexistent/switchyard.yaml"]
    argv += (
        [*command, b"ord\xffers", "primary"] if command == ["bindings", "set"] else [*command, b"ord\xffers"]
    )
    done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 2, err
    assert "Traceback" not in err, err
    assert r"b'ord\xffers' is not valid UTF-8" in err, err


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["Nightly"], "Invalid value for 'NAME': drill name 'Nightly': lower-case letters, digits and '-'"),
        (["nightly", "--every", "soon"], "Invalid value for '--every': 'soon' is not a duration"),
        (["nightly", "--every", "0s"], "a duration must be longer than zero"),
        (["nightly", "--every", "1d", "--at", "25:00"], "'25:00' is not a time of day: HH:MM, in UTC"),
        (["nightly", "--at", "02:30"], "Invalid value for --at: needs --every"),
        (
            ["nightly", "--every", "1h", "--at", "02:30"],
            "Invalid value for --at: 2:30:00 is not within --every",
        ),
    ],
)
def test_a_drill_schedule_is_refused_before_any_service_is_asked(args: list[str], why: str) -> None:
    code, out = invoke("drill", "schedule", *args, "--link", "p2s")
    assert code == 2, out
    assert why in out, out
