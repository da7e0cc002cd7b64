from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from switchyard import __version__
from switchyard.cli import base, cli
from switchyard.cli.base import SUBCOMMANDS
from tests.helpers.stacks import write_stack_config


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_help_lists_the_commands() -> None:
    code, out = run("--help")
    assert code == 0
    for command in ("stack", "demo", "version"):
        assert command in out


def test_each_command_is_found_in_the_module_the_table_names_for_it() -> None:
    """Commands are imported when run (``SUBCOMMANDS``): a command missing from the table would not be
    found, one under the wrong module would register something else."""
    for name, module in SUBCOMMANDS.items():
        held = importlib.import_module(f"switchyard.cli.{module}")
        assert any(getattr(held, attr) is cli.commands[name] for attr in dir(held)), (name, module)
    here = Path(base.__file__).parent
    modules = sorted(p.stem for p in here.glob("*.py") if p.stem not in ("__init__", "base"))
    assert sorted(set(SUBCOMMANDS.values())) == modules
    assert set(cli.commands) == {*SUBCOMMANDS, "version"}


def test_stack_help_lists_up_down_status() -> None:
    code, out = run("stack", "--help")
    assert code == 0
    for command in ("up", "down", "status"):
        assert command in out


@pytest.mark.parametrize("args", [("version",), ("--version",)])
def test_version(args: tuple[str, ...]) -> None:
    code, out = run(*args)
    assert code == 0
    assert __version__ in out


def test_a_bad_config_stops_with_the_key_and_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"a": {"bootstrap": "nope"}}, "default_cluster": "a"}))
    code, out = run("--config", str(path), "stack", "status")
    assert code == 2
    assert "error:" in out
    assert "clusters.a.bootstrap: expected host:port, got 'nope'" in out


def test_status_of_a_stack_that_is_not_running_reports_down_and_exits_1(tmp_path: Path) -> None:
    code, out = run("--config", str(write_stack_config(tmp_path)), "stack", "status")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split() == ["SERVICE", "ADDRESS", "PID", "HEALTH", "DETAIL"]
    rows = {line.split()[0]: line.split()[3] for line in lines[1:]}
    assert rows == {
        "zookeeper": "DOWN",
        "kafka-primary": "DOWN",
        "kafka-standby": "DOWN",
        "temporal": "DOWN",
        "temporal-ui": "DOWN",
    }


def test_down_with_nothing_running_says_so(tmp_path: Path) -> None:
    code, out = run("--config", str(write_stack_config(tmp_path)), "stack", "down")
    assert code == 0
    assert "nothing was running" in out
