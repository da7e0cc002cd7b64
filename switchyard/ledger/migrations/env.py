"""Alembic environment: migrations run on the connection the ledger hands over (never from a URL here)."""

from alembic import context

from switchyard.ledger.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
