"""The SQL ledger of routing changes (SQLAlchemy; SQLite by default, PostgreSQL by URL)."""

from switchyard.ledger.ledger import (
    BindingEvent,
    ClusterEvent,
    Ledger,
    LedgerState,
    LinkEvent,
    RoutingTxn,
    TxnRecord,
)

__all__ = ["BindingEvent", "ClusterEvent", "Ledger", "LedgerState", "LinkEvent", "RoutingTxn", "TxnRecord"]
