"""The embedded stack: ZooKeeper, the Temporal dev server and one Tansu broker per cluster."""

from switchyard.stack.control import ServiceStatus, Stack

# Tansu holds a group's first join for the whole session timeout (~23 s with the default 45 s);
# consumers on the embedded stack use a short one. A testbed setting: production clients keep theirs.
TESTBED_CONSUMER_SETTINGS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}

__all__ = ["TESTBED_CONSUMER_SETTINGS", "ServiceStatus", "Stack"]
