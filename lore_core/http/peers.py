"""Which OS user runs the process at the other end of a loopback connection.

On a shared host every local account (and a container on the host's network) can reach
127.0.0.1, so on the model routes, which plain clients use without the gateway token, the
gateway asks the kernel who owns the client's socket: the sockets of both ends of a
loopback connection live in the same kernel, and Linux's ``sock_diag`` netlink interface
answers an exact lookup by the connection's four addresses with the socket's user id
(``ss -e`` shows the same). One lookup is one netlink round trip (~10 us); no file is read
and nothing is cached, so a port reused by another process is never mistaken for the first.

Where the kernel cannot be asked (not Linux, or netlink refused in a sandbox),
:meth:`PeerUsers.uid_of` answers ``None`` and the caller decides what an unknown peer may do.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading

log = logging.getLogger("lore.access")

_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_NLMSG_HEADER = struct.Struct("=IHHII")
# inet_diag_req_v2: family, protocol, extensions, pad, states.
_REQUEST_HEADER = struct.Struct("=BBBBI")
# In inet_diag_msg, after family/state/timer/retrans (4 bytes) and the socket id (48):
# expires, rqueue, wqueue, uid, inode.
_UID_OFFSET = _NLMSG_HEADER.size + 4 + 48 + 12
_NO_COOKIE = struct.pack("=II", 0xFFFFFFFF, 0xFFFFFFFF)
_ALL_STATES = 0xFFFFFFFF


def _address(family: int, host: str) -> bytes:
    packed = socket.inet_pton(family, host)
    return packed + b"\0" * (16 - len(packed))


def _family_and_hosts(client_host: str, server_host: str) -> tuple[int, str, str]:
    """The address family the connection's sockets have, and both hosts in it: a socket
    bound to an IPv6 address sees IPv4 peers as ``::ffff:a.b.c.d``."""
    client_host, server_host = client_host.split("%", 1)[0], server_host.split("%", 1)[0]
    if ":" in client_host or ":" in server_host:
        if ":" not in client_host:
            client_host = "::ffff:" + client_host
        if ":" not in server_host:
            server_host = "::ffff:" + server_host
        return socket.AF_INET6, client_host, server_host
    return socket.AF_INET, client_host, server_host


class PeerUsers:
    """Answers "which user id owns the client end of this TCP connection" on Linux."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._netlink: socket.socket | None = None
        self._broken = not hasattr(socket, "AF_NETLINK")

    @property
    def available(self) -> bool:
        """Whether lookups can be made at all (checked at the first one)."""
        return not self._broken

    def _socket(self) -> socket.socket | None:
        if self._netlink is None and not self._broken:
            try:
                self._netlink = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
                self._netlink.settimeout(1.0)
            except OSError as exc:
                self._broken = True
                log.warning("cannot ask the kernel which user a loopback client runs as: %s", exc)
        return self._netlink

    def uid_of(self, client: tuple[str, int], server: tuple[str, int]) -> int | None:
        """The user id owning the socket at ``client`` connected to ``server`` (both
        ``(host, port)`` as the server sees them), or ``None`` when it cannot be told."""
        try:
            family, client_host, server_host = _family_and_hosts(client[0], server[0])
            socket_id = (
                struct.pack("!HH", client[1], server[1])
                + _address(family, client_host)
                + _address(family, server_host)
                + struct.pack("=I", 0)
                + _NO_COOKIE
            )
        except (OSError, ValueError, struct.error):
            return None
        request = _REQUEST_HEADER.pack(family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES) + socket_id
        size = _NLMSG_HEADER.size + len(request)
        message = _NLMSG_HEADER.pack(size, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
        with self._lock:  # one question, one answer on the shared socket
            netlink = self._socket()
            if netlink is None:
                return None
            try:
                netlink.send(message + request)
                answer = netlink.recv(8192)
            except OSError as exc:
                log.warning("asking the kernel for a loopback client's user failed: %s", exc)
                return None
        if len(answer) < _UID_OFFSET + 4:
            return None
        kind = _NLMSG_HEADER.unpack_from(answer)[1]
        if kind != _SOCK_DIAG_BY_FAMILY:
            return None  # NLMSG_ERROR: no such socket (already closed), or refused
        return int(struct.unpack_from("=I", answer, _UID_OFFSET)[0])

    def close(self) -> None:
        with self._lock:
            if self._netlink is not None:
                self._netlink.close()
                self._netlink = None
