"""The ledger's connection and schema: one SQLAlchemy engine, the schema brought to the newest Alembic
revision when the ledger is opened (Alembic imported only when it is behind: a tenth of a second of
every process's start), and one error type for every SQL problem."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

from sqlalchemy import Connection, Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from switchyard.errors import LedgerError

MIGRATIONS = Path(__file__).with_name("migrations")
HEAD = max(p.name[:4] for p in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
"""The newest revision: each revision is named by its file's number (tests/integration/test_ledger.py)."""


class LedgerBase:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str) -> Self:
        """Connect and bring the schema to the newest revision."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        ledger = cls(create_engine(url))
        ledger.migrate()
        return ledger

    def migrate(self) -> None:
        with self._connection() as conn:
            if revision(conn) == HEAD:
                return
            from alembic import command
            from alembic.config import Config as AlembicConfig

            config = AlembicConfig()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"ledger {self.engine.url.render_as_string()}: {exc}") from exc


def revision(conn: Connection) -> str | None:
    """The schema's revision, None before the first."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    found: str | None = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return found


def utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything the ledger stores is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)
