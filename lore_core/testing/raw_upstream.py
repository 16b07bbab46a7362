"""A loopback upstream that misbehaves at the byte level, for fault tests.

:class:`~lore_core.testing.fake_upstream.FakeUpstream` answers like a provider; this one
answers every connection with a scripted list of steps, after reading the request: bytes
to send, pauses, a TCP reset (``SO_LINGER`` 0, the peer sees ``ECONNRESET``) or a plain
close. It can send what no well-behaved server library would: a response cut inside its
headers, an event stream of garbage, a body that stops and never ends.

    with RawUpstream() as raw:
        raw.script = [http_head(200, "application/json", length=100), b'{"id"', 30.0]
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Literal

from lore_core.testing.net import free_port

Step = bytes | float | Literal["reset", "close"]


def http_head(status: int, content_type: str, length: int | None = None, reason: str = "X") -> bytes:
    """A response's status line and headers; without ``length``, the body ends at close."""
    lines = [f"HTTP/1.1 {status} {reason}", f"content-type: {content_type}", "connection: close"]
    if length is not None:
        lines.append(f"content-length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class RawUpstream:
    """Answers each connection with ``script`` (read when the request has arrived)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.script: Sequence[Step] = ["close"]
        self.requests: list[bytes] = []  # each request as received (head and body)
        self._server: socket.socket | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> RawUpstream:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(64)
        server.settimeout(0.2)
        self._server = server
        thread = threading.Thread(target=self._accept, name="raw-upstream", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(5)
        if self._server is not None:
            self._server.close()

    def __enter__(self) -> RawUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        assert self._server is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._answer, args=(conn, list(self.script)), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _answer(self, conn: socket.socket, script: list[Step]) -> None:
        with conn:
            request = _read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            for step in script:
                if self._stopping.is_set():
                    return
                try:
                    if isinstance(step, bytes):
                        conn.sendall(step)
                    elif isinstance(step, float | int):
                        self._stopping.wait(step)
                    elif step == "reset":
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        return
                    else:
                        return
                except OSError:
                    return  # the gateway hung up first


def _read_request(conn: socket.socket) -> bytes | None:
    """Head and ``content-length`` body of one request (the gateway sends no chunked body)."""
    conn.settimeout(10)
    data = b""
    deadline = time.monotonic() + 10
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk or time.monotonic() > deadline:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            body += chunk
    except OSError:
        return None
    return head + b"\r\n\r\n" + body
