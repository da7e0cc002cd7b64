"""The root `switchyard` command and what every sub-command shares.

Errors Switchyard raises on purpose print as one ``error:`` line (or block) and end the command with
the error's own exit code (see :mod:`switchyard.errors`); anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import getpass
import importlib
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar, cast

import click

from switchyard import __version__, telemetry
from switchyard.config import Config, load_config
from switchyard.errors import SwitchyardError
from switchyard.keys import BindingKey, check_name
from switchyard.model import Link
from switchyard.routing import RoutingStore, open_store

V = TypeVar("V")


class Group(click.Group):
    """A command group whose Switchyard errors become a message and the error's exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SwitchyardError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


SUBCOMMANDS = {
    "bindings": "bindings", "clusters": "clusters", "demo": "stack", "drill": "drills",
    "evacuate": "evacuate", "evacuation": "evacuate", "failover": "sagas", "links": "links",
    "migrate-partition": "sagas", "migrate-topic": "sagas", "migrations": "migrations",
    "reconcile": "verification", "report": "reports", "sagas": "sagas", "stack": "stack",
    "status": "status", "switchback": "sagas", "switchover": "sagas", "usage": "usage",
    "verify": "verification",
}  # fmt: skip
"""Each command of this package and the module of ``switchyard.cli`` that holds it, imported when the
command is run: a process pays for what it runs (the gateway and the mirror no Temporal SDK, a
``bindings`` call no saga code)."""


class RootGroup(Group):
    """Imports a command's module only when it is run, and adds the process commands registered under
    the ``switchyard.commands`` entry point group the same way."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in set(SUBCOMMANDS.values()):
            importlib.import_module(f"switchyard.cli.{module}")
        return sorted({*super().list_commands(ctx), *(ep.name for ep in _plugins())})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in SUBCOMMANDS:
            importlib.import_module(f"switchyard.cli.{SUBCOMMANDS[cmd_name]}")
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        plugin = next((ep for ep in _plugins() if ep.name == cmd_name), None)
        loaded: click.Command | None = plugin.load() if plugin is not None else None
        return loaded


def _plugins() -> list[EntryPoint]:
    return list(entry_points(group="switchyard.commands"))


def config_of(ctx: click.Context, service: str = "cli") -> Config:
    """Load the configuration once per invocation, then set up logging and telemetry from it (the first
    call's ``service`` names the process)."""
    config = loaded_config(ctx)
    telemetry.setup(config, service)
    return config


def loaded_config(ctx: click.Context) -> Config:
    """The configuration, loaded once per invocation; no logging or telemetry set up."""
    root = ctx.find_root()
    if "config" not in root.meta:
        root.meta["config"] = load_config(root.params.get("config_path"))
    loaded: Config = root.meta["config"]
    return loaded


@contextmanager
def store_of(ctx: click.Context) -> Iterator[RoutingStore]:
    with open_store(config_of(ctx)) as store:
        yield store


def link_of(store: RoutingStore, link_id: str) -> Link:
    """The link, or a usage error naming it."""
    link = store.link(link_id)
    if link is None:
        raise click.ClickException(f"link {link_id!r} does not exist (switchyard links list)")
    return link


def undecodable(text: str) -> str | None:
    """The bytes of ``text`` as a bytes literal when they are not valid UTF-8, else None.

    Python hands over command-line bytes that are not UTF-8 as lone surrogates; such text names nothing
    (ZooKeeper, the ledger and Temporal all take UTF-8) and cannot even be printed, so it is refused.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return repr(text.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:  # a surrogate that stands for no byte of the command line
            return ascii(text)
    return None


class _Text(click.ParamType[V]):
    """Command-line text that is valid UTF-8 and names what :meth:`check` wants."""

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> V:
        if not isinstance(value, str):  # a default, or converted already
            return cast("V", value)
        shown = undecodable(value)
        if shown is not None:
            self.fail(f"{shown} is not valid UTF-8", param, ctx)
        try:
            return self.check(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)

    @abstractmethod
    def check(self, text: str) -> V:
        """The value ``text`` names; ValueError saying why it names none."""


class KeyType(_Text[BindingKey]):
    """A binding key, checked the same way by every command that takes one."""

    name = "KEY"

    def check(self, text: str) -> BindingKey:
        return BindingKey.parse(text)


class NameType(_Text[str]):
    """The name of a cluster or a link: what the routing store would accept."""

    name = "NAME"

    def __init__(self, what: str) -> None:
        self.what = what

    def check(self, text: str) -> str:
        return check_name(self.what, text)


class SagaType(_Text[str]):
    """A saga's id, as Temporal knows it. Only what can name no saga is refused here: an id written
    before keys were checked (a line break in it, say) must still be reachable."""

    name = "SAGA"

    def check(self, text: str) -> str:
        if not text:
            raise ValueError("the saga id is empty (switchyard sagas list)")
        return text


KEY = KeyType()
KEY_FORMS = "KEY is AppID, AppID@Instance, AppID#Topic or AppID##Group."
SAGA = SagaType()


def default_actor() -> str:
    return f"user:{getpass.getuser()}"


actor_option = click.option(
    "--by", "actor", default=default_actor, show_default="user:<login>", help="Who makes the change."
)
reason_option = click.option("--reason", default="manual change", show_default=True, help="Why.")


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Configuration file (default: $SWITCHYARD_CONFIG, then ./switchyard.yaml).",
)
@click.version_option(__version__, "-V", "--version", prog_name="switchyard")
def cli(config_path: str | None) -> None:
    """Switchyard moves Kafka clients between clusters without their help."""


@cli.command()
def version() -> None:
    """Print the version."""
    click.echo(f"switchyard {__version__}")
