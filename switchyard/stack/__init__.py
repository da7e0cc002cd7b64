"""The embedded stack: ZooKeeper, the Temporal dev server and an Apache Kafka cluster for each cluster."""

from switchyard.stack.control import ServiceStatus, Stack

__all__ = ["ServiceStatus", "Stack"]
