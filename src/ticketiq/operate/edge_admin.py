"""HAProxy's runtime API, as a roll uses it: drain an app process (no new requests reach it; those in
flight finish), point its server at the process that replaces it, and take it back into rotation. The
edge's configuration opens the API on a Unix socket beside it (`edge.haproxy_config(admin_socket=)`), for
the user who runs the cluster only. One command a connection, as `socat` would send it."""

from __future__ import annotations

import csv
import socket
from dataclasses import dataclass
from pathlib import Path

from ticketiq.errors import TicketIQError

BACKEND = "app"  # the backend the generated configuration names


@dataclass(frozen=True)
class EdgeAdmin:
    path: Path
    timeout_s: float = 5.0

    def command(self, line: str) -> str:
        """Send one command; return HAProxy's answer. A refusal it words is raised with its words."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(self.timeout_s)
            sock.connect(str(self.path))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        answer = b"".join(chunks).decode(errors="replace")
        if refused(answer):
            raise TicketIQError(f"the edge refused `{line}`: {answer.strip()}")
        return answer

    def drain(self, server: str) -> None:
        self.command(f"set server {BACKEND}/{server} state drain")

    def ready(self, server: str) -> None:
        self.command(f"set server {BACKEND}/{server} state ready")

    def point(self, server: str, host: str, port: int) -> None:
        """Send the server's next requests (and health checks) to host:port."""
        self.command(f"set server {BACKEND}/{server} addr {host} port {port}")

    def sessions(self, server: str) -> int:
        """Requests the edge has open with the server now."""
        return current_sessions(self.command("show stat"), server)


def refused(answer: str) -> bool:
    """Pure: whether the runtime API's answer says the command was not carried out."""
    first = answer.strip().splitlines()[0] if answer.strip() else ""
    return (
        first.startswith(("Unknown command", "No such", "Require ", "Permission denied")) or "invalid" in first.lower()
    )


def current_sessions(stat_csv: str, server: str, backend: str = BACKEND) -> int:
    """Pure: the `scur` of backend/server in `show stat`'s CSV."""
    text = stat_csv.lstrip("# ")
    for row in csv.DictReader(text.splitlines()):
        if row.get("pxname") == backend and row.get("svname") == server:
            return int(row.get("scur") or 0)
    raise TicketIQError(f"the edge has no server {backend}/{server}")
