"""Every error Switchyard raises on purpose, so callers and the CLI can tell them apart.

    SwitchyardError
    ├── ConfigError            a configuration file or override is invalid (names the key)
    ├── KafkaOperationError    a Kafka call did not do all it was asked (names cluster, topic, counts)
    └── StackError             the embedded stack could not be started, stopped or reached
        └── PortInUseError     a port the stack needs is held by a process it did not start

Each error carries the exit code the CLI ends with when it is not caught.
"""


class SwitchyardError(Exception):
    """Base of every error Switchyard raises deliberately."""

    exit_code = 1


class ConfigError(SwitchyardError):
    """The configuration is invalid; the message names the file, the key and the problem."""

    exit_code = 2


class KafkaOperationError(SwitchyardError):
    """A Kafka operation failed or did only part of its work."""


class StackError(SwitchyardError):
    """A service of the embedded stack could not be started, stopped or reached."""

    exit_code = 3


class PortInUseError(StackError):
    """A port the stack would listen on is already taken by a process it did not start."""
