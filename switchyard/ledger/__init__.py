"""The SQL ledger (SQLAlchemy; SQLite by default, PostgreSQL by URL): routing changes, the Spark jobs'
findings, and the sagas' trails, each in a module of its own over one connection."""

from switchyard.ledger.jobs import JobRecords
from switchyard.ledger.kinds import BindingEvent, ClusterEvent, LinkEvent
from switchyard.ledger.routing import RoutingRecords, RoutingTxn, TxnRecord
from switchyard.ledger.sagas import SagaRecords


class Ledger(RoutingRecords, JobRecords, SagaRecords):
    """The whole ledger: open it once per process (``Ledger.open(url)``) and close it at the end."""


__all__ = ["BindingEvent", "ClusterEvent", "Ledger", "LinkEvent", "RoutingTxn", "TxnRecord"]
