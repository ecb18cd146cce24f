"""A bench's server in a child process, so that the CPU the bench counts (time.process_time) is the
client's alone: started with this tree's `src` importable, waited for until `ready` answers, ended with
the bench."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serving(code: str, ready: str, within_s: float = 30.0) -> Iterator[str]:
    """Run `code` (a Python program serving on the port given as its one argument) in a child process;
    yields its base URL once a GET of `ready` (a path) answers 2xx."""
    port = free_port()
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    server = subprocess.Popen([sys.executable, "-c", code, str(port)], env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + within_s
        while True:
            try:
                httpx.get(base + ready, timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit(f"the bench's server did not answer {ready}") from None
                time.sleep(0.1)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=10)
