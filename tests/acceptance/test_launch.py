"""Starting an app process (operate/launch.py): it counts as ready only when /readyz answers from its own
socket. A port picked free can be taken by another program before the child binds it; that program may
answer /readyz too, and a caller told "ready" would then send its requests to a stranger (a 401 for a
token that stranger does not know, seen once in a `make test`). A start interrupted while its process comes up
(Ctrl-C, a caller giving up) ends that process: none outlives the start that made it."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import psutil
import pytest

from tests.support.cluster import Cluster
from ticketiq.errors import TicketIQError
from ticketiq.operate.launch import listens, start_serve


class _Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"ready": true, "process": "a stranger"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def a_stranger_answering_readyz() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ready)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_a_socket_counts_as_the_processes_own_only_when_it_listens_there() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert listens(os.getpid(), port)
        with socket.socket() as other:
            other.bind(("127.0.0.1", 0))
            assert not listens(os.getpid(), other.getsockname()[1])  # bound, not listening
    assert not listens(os.getpid(), port)  # closed


def test_a_stranger_answering_readyz_on_the_port_is_not_the_process_started(db_url: str, tmp_path: Path) -> None:
    cluster = Cluster(db_url, tmp_path).start()
    try:
        with a_stranger_answering_readyz() as port, pytest.raises(TicketIQError, match="exited"):
            # Told to use a port a stranger holds, the child cannot bind it and exits: never "ready".
            start_serve(cluster.env, tmp_path, port=port, name="late", timeout_s=60)
    finally:
        cluster.stop()


def test_a_start_interrupted_while_the_process_comes_up_ends_that_process(db_url: str, tmp_path: Path) -> None:
    cluster = Cluster(db_url, tmp_path).start()
    before = {p.pid for p in psutil.Process().children(recursive=True)}

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # as Ctrl-C does, while the start waits for /readyz

    was = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # an app process takes seconds to import and start
        with pytest.raises(KeyboardInterrupt):
            start_serve(cluster.env, tmp_path, name="interrupted", timeout_s=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, was)
    try:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
        assert [p.cmdline() for p in left if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        cluster.stop()
