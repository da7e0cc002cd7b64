"""What :class:`switchyard.wire.Wire` does with answers a broker should never send: each is a connection
lost (``EOFError``), so the ask goes to the next bootstrap server and ``asked_until`` asks again, and no
connection that answered wrongly is kept for the next ask. A real broker answers well-formed frames; a
loopback server stands in for one that does not."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.metadata.v12.response import MetadataResponse

from switchyard.frames.protocol import Request, encode_response, parse_request
from switchyard.wire import Wire
from tests.helpers.frames import example

Answer = Callable[[Request], bytes]
_SIZE = struct.Struct(">i")


def good(request: Request) -> bytes:
    return encode_response(request, example(MetadataResponse))


def short(_: Request) -> bytes:
    return _SIZE.pack(2) + b"\x00\x01"  # too short to carry a correlation id


def another(request: Request) -> bytes:
    frame = bytearray(good(request))
    _SIZE.pack_into(frame, 4, request.correlation_id + 1)
    return bytes(frame)


def garbled(request: Request) -> bytes:
    frame = good(request)
    return _SIZE.pack(12) + frame[4:16]  # the header, then a body cut short


class Broker:
    """Answers each request it reads with the next of ``answers``; counts the connections it took."""

    def __init__(self, answers: list[Answer]) -> None:
        self.answers = answers
        self.connections = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = self.server.getsockname()[:2]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(connection,), daemon=True).start()

    def _answer(self, connection: socket.socket) -> None:
        with connection:
            while self.answers:
                head = connection.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                frame = connection.recv(_SIZE.unpack(head)[0], socket.MSG_WAITALL)
                connection.sendall(self.answers.pop(0)(parse_request(frame)))


@pytest.fixture
def brokers() -> Iterator[list[Broker]]:
    made: list[Broker] = []
    yield made
    for broker in made:
        broker.server.close()


METADATA = MetadataRequest(
    topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def ask(wire: Wire) -> MetadataResponse:
    answer: MetadataResponse = wire.ask_any(METADATA, time.monotonic() + 5)
    return answer


@pytest.mark.parametrize("wrong", [short, another, garbled])
def test_an_answer_that_does_not_read_is_a_connection_lost_and_the_next_server_is_asked(
    brokers: list[Broker], wrong: Answer
) -> None:
    brokers += [Broker([wrong]), Broker([good, good])]
    wire = Wire(",".join(f"{h}:{p}" for h, p in (b.address for b in brokers)))
    with pytest.raises(EOFError):
        wire.ask(brokers[0].address, METADATA, time.monotonic() + 5)
    brokers[0].answers.append(wrong)
    assert ask(wire) == example(MetadataResponse)
    assert wire.servers[0] == brokers[1].address  # the one that answered is asked first from now on
    assert ask(wire) == example(MetadataResponse)
    assert brokers[1].connections == 1, "the connection that answered well is kept"


def test_a_kept_connection_that_answers_wrongly_is_dropped_and_the_ask_made_on_a_new_one(
    brokers: list[Broker],
) -> None:
    brokers.append(Broker([good, another, good]))
    wire = Wire("{}:{}".format(*brokers[0].address))
    assert ask(wire) == example(MetadataResponse)
    assert ask(wire) == example(MetadataResponse)  # the kept connection answered another request
    assert brokers[0].connections == 2
    # nothing more to answer: the kept connection closes, and so does the new one
    with pytest.raises((EOFError, OSError)):
        ask(wire)
    assert brokers[0].connections == 3
