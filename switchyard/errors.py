"""Every error Switchyard raises on purpose, so callers and the CLI can tell them apart.

    SwitchyardError
    ├── ConfigError            a configuration file or override is invalid (names the key)
    ├── KafkaOperationError    a Kafka call did not do all it was asked (names cluster, topic, counts)
    ├── StackError             the embedded stack could not be started, stopped or reached
    │   └── PortInUseError     a port the stack needs is held by a process it did not start
    ├── RoutingError           the routing state (ZooKeeper) could not be read or changed
    │   ├── RoutingUnavailable ZooKeeper cannot be reached, or the session was lost mid-change
    │   ├── BindingConflict    a key moved since its epoch was read (names key and both epochs)
    │   ├── BindingRefused     a change that must not be made (unknown or shielded cluster, ...)
    │   ├── LockHeld           another saga holds the key's lock (names the owner)
    │   ├── GatewayIdInUse     another live gateway registered under the same id
    │   └── AcksTimeout        gateways did not apply an epoch in time (names the laggards)
    ├── LedgerError            the SQL ledger could not be written or read
    ├── GatewayError           the gateway cannot serve (a port it needs is taken, ...)
    └── SagaError              a saga step found it must not go on (names what it found)
        ├── UnknownSaga        Temporal knows no saga by the id given (names it)
        ├── SagaEnded          the saga has ended: nothing left to approve, reject or cancel
        ├── SwitchRefused      the switch cannot be done as asked; nothing was changed
        ├── FenceBroken        the source's ends moved after the block: a writer goes around the gateway
        ├── DrainTimeout       the copy did not reach the source's ends in time
        ├── GroupActive        a group to move still has members on the target
        └── CopyDiverged       the copy does not hold exactly what the source holds

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


class NoSuchTopic(KafkaOperationError):
    """The topic a read was asked for does not exist."""


class UnknownPartition(KafkaOperationError):
    """librdkafka does not know a partition it was asked about: it may not exist, or the client's
    metadata predates it (a long-lived client kept a topic created since unknown for over a minute)."""


class StackError(SwitchyardError):
    """A service of the embedded stack could not be started, stopped or reached."""

    exit_code = 3


class TemporalRefused(SwitchyardError):
    """Temporal answered, but refused the call (namespace unknown, permission denied, bad argument): a
    configuration to fix, not a moment to wait for."""

    exit_code = 3


class PortInUseError(StackError):
    """A port the stack would listen on is already taken by a process it did not start."""


class RoutingError(SwitchyardError):
    """The routing state in ZooKeeper could not be read or changed."""

    exit_code = 4


class RoutingUnavailable(RoutingError):
    """ZooKeeper cannot be reached, or the connection was lost while a change was in flight."""


class BindingConflict(RoutingError):
    """A key's epoch is not the one the caller read: someone else changed it first (fencing)."""

    def __init__(self, key: str, expected: int, actual: int, detail: str = "") -> None:
        super().__init__(
            f"{key}: expected epoch {expected}, but it is at epoch {actual}{detail}; "
            "read it again and decide anew"
        )
        self.key, self.expected, self.actual = key, expected, actual


class BindingRefused(RoutingError):
    """The change is refused as it stands (unknown or shielded cluster, nothing to change, ...)."""

    exit_code = 5


class LockHeld(RoutingError):
    """Another owner holds the lock of a binding key."""

    def __init__(self, key: str, owner: str, since: str) -> None:
        super().__init__(f"{key}: locked by {owner} since {since}")
        self.key, self.owner = key, owner


class GatewayIdInUse(RoutingError):
    """A live gateway is already registered under this id."""


class AcksTimeout(RoutingError):
    """Some registered gateways did not apply the epoch before the deadline."""

    def __init__(self, epoch: int, laggards: dict[str, int], timeout_s: float) -> None:
        names = ", ".join(f"{g} (at epoch {e})" for g, e in sorted(laggards.items()))
        super().__init__(f"gateways had not applied epoch {epoch} after {timeout_s:g}s: {names}")
        self.epoch, self.laggards = epoch, laggards


class LedgerError(SwitchyardError):
    """The SQL ledger could not be read or written."""

    exit_code = 6


class GatewayError(SwitchyardError):
    """The gateway cannot serve as configured (a port it must listen on is taken, ...)."""

    exit_code = 7


class SagaError(SwitchyardError):
    """A saga step found that the saga must not go on."""

    exit_code = 8


class UnknownSaga(SagaError):
    """Temporal knows no saga by this id: never started, or its history is past the retention."""

    def __init__(self, saga: str) -> None:
        super().__init__(f"no saga {saga} in Temporal (switchyard sagas list)")
        self.saga = saga


class SagaEnded(SagaError):
    """The saga has ended, so a decision or a cancellation has nothing left to act on."""

    def __init__(self, saga: str, status: str, action: str) -> None:
        super().__init__(
            f"saga {saga} has ended ({status}): nothing to {action} (switchyard sagas show '{saga}')"
        )
        self.saga, self.status = saga, status


class SwitchRefused(SagaError):
    """The switch cannot be done as asked (the plan says why); nothing was changed."""


class FlipLanded(SagaError):
    """A step meant for before the flip, asked after the saga's flip landed (the worker that ran the held
    steps died before the saga heard of them): the saga goes forward from the flip."""


class FenceBroken(SagaError):
    """After the block, the source's partition ends kept moving: something writes around the gateway."""


class TransactionsOpen(SagaError):
    """A transaction on a partition being switched did not end in time: the copy cannot pass it."""


class AppendsUncommitted(SagaError):
    """Records a leader appended on a partition being switched were not committed in time: the source's
    end is not known yet."""


class DrainTimeout(SagaError):
    """The copy did not reach the source's ends in time."""


class CopyFailed(SagaError):
    """The mirror stopped copying a partition (its status names the reason)."""


class GroupActive(SagaError):
    """A consumer group that must move still has members on the target: its offsets there cannot be set."""


class CopyDiverged(SagaError):
    """The copy does not hold exactly what the source holds."""
