"""What a process listens on (read from /proc, Linux), and whether another interface gets in.

"Another interface" is emulated on loopback: a socket bound to 127.0.0.1 refuses connections to
127.0.0.2, one bound to 0.0.0.0 or :: accepts them. Only loopback addresses are ever dialled.
"""

from __future__ import annotations

import ipaddress
import os
import socket

OTHER_INTERFACE = "127.0.0.2"


def _decode(hex_address: str) -> str:
    raw = bytes.fromhex(hex_address)
    # /proc/net/tcp* print each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(raw))


def listening(pid: int) -> set[tuple[str, int]]:
    """``{(address, port)}`` of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                out.add((_decode(address), int(port, 16)))
    return out


def reachable_from_other_interface(port: int, timeout: float = 2.0) -> bool:
    """Whether a TCP connection to ``127.0.0.2:port`` is accepted."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((OTHER_INTERFACE, port))
        except OSError:
            return False
        return True


def exposed(pids: list[int]) -> list[tuple[int, str, int]]:
    """The ``(pid, address, port)`` listeners of ``pids`` that accept connections on 127.0.0.2."""
    return [
        (pid, address, port)
        for pid in pids
        for address, port in sorted(listening(pid))
        if reachable_from_other_interface(port)
    ]
