"""Switchyard: moves Kafka clients between clusters without their help."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("switchyard")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
