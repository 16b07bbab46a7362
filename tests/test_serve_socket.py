"""The socket `lore serve` listens on: hypercorn is handed its descriptor, so what hypercorn
would set on a socket it bound itself has to be set here."""

from __future__ import annotations

import socket

from lore_core.http.serve import listen_socket


def test_accepted_connections_send_without_waiting_for_acks() -> None:
    # Without TCP_NODELAY, an answer written as headers then body waited for the client's
    # delayed ACK (~40 ms per non-streamed answer to curl or http.client, measured).
    server = listen_socket("127.0.0.1", 0)
    try:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        try:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        finally:
            accepted.close()
            client.close()
    finally:
        server.close()
