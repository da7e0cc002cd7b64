"""A Kafka client on a plain socket, for what stock clients never send: pipelined requests to several
places on one connection, versions nobody offered, frames cut short."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from workers.gateway.protocol import Request, decode_response, encode_request


class RawClient:
    def __init__(self, port: int, *, timeout_s: float = 15.0, client_id: str = "raw") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.client_id = client_id
        self._correlation = 0

    def send(self, api_key: int, version: int, **fields: Any) -> Request:
        self._correlation += 1
        request = encode_request(
            api_key, version, fields, client_id=self.client_id, correlation_id=self._correlation
        )
        self.send_bytes(struct.pack(">i", len(request.frame)) + request.frame)
        return request

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> bytes:
        """The next response frame (without its size); EOFError when the gateway closed the connection."""
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def answer(self, request: Request) -> Any:
        return decode_response(request, self.frame())

    def closed_within(self, seconds: float) -> float:
        """How long until the gateway closed the connection (AssertionError if it sent data or did not)."""
        started = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1)
        except TimeoutError:
            raise AssertionError(f"the connection was still open after {seconds}s") from None
        except ConnectionResetError:
            data = b""
        assert data == b"", f"an answer came instead of the end: {data!r}"
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()

    def _exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError(f"connection closed after {len(data)} of {size} bytes")
            data += chunk
        return bytes(data)
