"""Start `ticketiq standins` and `ticketiq serve` as child processes and end them by their pid.

Used by the demo, the acceptance tests and the benchmarks, which all run the real CLI. `python` names
another interpreter to run it with: bench/client.py starts an earlier release from a venv of its own.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from ticketiq.errors import TicketIQError

PORT_TRIES = 3  # a free port taken by another program before the child bound it: picked again this often
STANDIN_KEYS = ("TICKETIQ_MODEL_BASE_URL", "TICKETIQ_WEBHOOK_URL")  # the first and last it prints
# How a child is started. The test suite starts its many from a fork server that imported the CLI once
# (tests/support/preforked.py): the same command, without a fresh interpreter's seconds of imports.
popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict, repr=False)  # the database URL may be in it

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it lingers. Only this child's pid is signalled."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._close()

    def _close(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


def _cli(python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "ticketiq.cli"]


@contextlib.contextmanager
def owned(child: Child) -> Iterator[None]:
    """While a child is being started: if the start fails or is interrupted (Ctrl-C, a caller giving up), the
    child is killed before that goes on, so no process outlives the start that made it (a `ticketiq cluster`
    stopped while its second app process started left that one serving, with no one to stop it)."""
    try:
        yield
    except BaseException:
        child.kill()
        raise


def start_standins(
    env: dict[str, str], log_dir: Path, *args: str, timeout_s: float = 60.0, python: str | None = None
) -> Child:
    """Start the stand-ins on a free port; return them with the KEY=value settings they printed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "standins.log"
    with open(log_path, "ab") as log:
        proc = popen([*_cli(python), "standins", "--port", "0", *args], env=env, stdout=subprocess.PIPE, stderr=log)
    child = Child("standins", proc, log_path)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    buffer = b""
    with owned(child):
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise TicketIQError(f"the stand-ins exited with {proc.returncode}:\n{child.log_tail()}")
            ready, _, _ = select.select([proc.stdout], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            buffer += chunk
            for line in buffer.decode(errors="replace").splitlines():
                key, sep, value = line.partition("=")
                if sep and key.startswith("TICKETIQ_"):
                    child.env[key] = value.strip()
            if all(k in child.env for k in STANDIN_KEYS):
                return child
        raise TicketIQError(f"the stand-ins printed no settings within {timeout_s:.0f} s:\n{child.log_tail()}")


def spawn_serve(
    env: dict[str, str], log_dir: Path, port: int | None = None, name: str = "serve", python: str | None = None
) -> tuple[Child, str]:
    """Start an app process and return it and its base URL at once, before it is ready (`ready`)."""
    port = port or free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = popen([*_cli(python), "serve", "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
    return Child(name, proc, log_path, env), f"http://127.0.0.1:{port}"


def probe_client() -> httpx.Client:
    # One client for every look: each new one makes an SSL context, ten times a second. And one without the
    # CA roots: the look is plain http to the child's own port, and loading the roots cost some 20 ms of CPU
    # a start.
    return httpx.Client(timeout=1.0, verify=False, limits=httpx.Limits(max_keepalive_connections=0))


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself listens on `port`. A port picked free may be taken by another program
    before the child binds it (the child then exits), and that program may answer /readyz meanwhile: a
    ready answer counts only from the child's own socket."""
    try:
        return any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in psutil.Process(pid).net_connections("tcp"))  # fmt: skip
    except psutil.Error:
        return False


def ready(client: httpx.Client, base: str) -> bool:
    """Whether the app process at `base` answers /readyz 200 now."""
    try:
        return client.get(f"{base}/readyz").status_code == 200
    except httpx.HTTPError:
        return False


def start_serve(
    env: dict[str, str],
    log_dir: Path,
    port: int | None = None,
    name: str = "serve",
    timeout_s: float = 60.0,
    python: str | None = None,
) -> tuple[Child, str]:
    """Start an app process; return it and its base URL once /readyz answers from its own socket. A port
    picked free that another program took first is picked again (`port` None), at most `PORT_TRIES` times."""
    deadline = time.monotonic() + timeout_s
    for tries in range(1, PORT_TRIES + 1):
        child, base = spawn_serve(env, log_dir, port, name, python)
        bound = int(base.rsplit(":", 1)[1])
        with owned(child), probe_client() as client:
            while time.monotonic() < deadline:
                if child.proc.poll() is not None:
                    if port is None and tries < PORT_TRIES and "address already in use" in child.log_tail().lower():
                        break  # the port went to another program before the child bound it: another port
                    raise TicketIQError(f"{name} exited with {child.proc.returncode}:\n{child.log_tail()}")
                if ready(client, base) and listens(child.pid, bound):
                    return child, base
                time.sleep(0.1)
            else:
                raise TicketIQError(f"{name} was not ready within {timeout_s:.0f} s:\n{child.log_tail()}")
    raise AssertionError("unreachable: the last try returns or raises")
