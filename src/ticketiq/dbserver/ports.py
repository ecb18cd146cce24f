"""Ports on 127.0.0.1 for the servers we start (the embedded Postgres, the formation's nodes)."""

from __future__ import annotations

import socket
from pathlib import Path


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound. SO_REUSEADDR, as Postgres binds: a port left in TIME_WAIT
    by a server's last life is free to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range: ours are drawn from below it, so that no program
    binding port 0 is handed one of them."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
