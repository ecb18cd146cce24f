"""`ticketiq serve` and `ticketiq standins` for the tests, forked from a server that imported them once.

A fresh interpreter spends 2-3 s of CPU importing the app (FastAPI, the OpenAI client's types, the A2A
SDK, ...) before it serves anything, and the suite starts a few hundred of them: a third of the CPU of
the whole suite, on a 2-core machine where CPU is what the tests that run side by side wait for. So
`ticketiq.operate.launch` starts them here through multiprocessing's fork server, which imported the CLI and
the app once: each child is forked from it and runs the CLI's own `main` with the argv and environment
it was given, its output in its log file. It is a process of its own as before (its own pid, signals,
exit status: a SIGKILL is -9, a stalled process's own exit code is its code), started by another
route; nothing in it is shared with the test or with the other children.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection
from typing import IO, Any

_CLI = ("-m", "ticketiq.cli")
# What the fork server imports once; each child then finds it loaded.
_PRELOAD = ["ticketiq.cli.main", "ticketiq.entries.api", "ticketiq.standins.app", "ticketiq.standins.server",
            "tests.support.preforked", "uvicorn", "uvloop", "uvicorn.protocols.http.httptools_impl",
            "anyio._backends._asyncio", "tests.support.frozen_heap"]  # fmt: skip
# The PYTHONPATH the fork server starts with (it inherits this process's environment).
_SERVER_PYTHONPATH = os.environ.get("PYTHONPATH", "")
_context = multiprocessing.get_context("forkserver")
_context.set_forkserver_preload(_PRELOAD)


def _run(argv: list[str], env: dict[str, str], out: Connection | str, err: str | None) -> None:
    """In the child: its environment, stdout and stderr as a new process would have them, then the CLI."""
    os.environ.clear()
    os.environ.update(env)
    out_fd = os.dup(out.fileno()) if isinstance(out, Connection) else os.open(out, os.O_WRONLY | os.O_APPEND)
    err_fd = out_fd if err is None else os.open(err, os.O_WRONLY | os.O_APPEND)
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own stdout)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = ["ticketiq", *argv]
    _start_up_path(env.get("PYTHONPATH", ""))
    from ticketiq.cli import main as cli

    sys.exit(cli.main(argv))


def _start_up_path(python_path: str) -> None:
    """What interpreter start does with a PYTHONPATH of the child's own, which the fork server did not
    have: its folders go first on the path, and a `sitecustomize` in one of them is run (as `site` runs
    it; tests/support/job_kinds.py gives one that adds the test job kinds)."""
    inherited = _SERVER_PYTHONPATH.split(os.pathsep)
    added = [entry for entry in python_path.split(os.pathsep) if entry and entry not in inherited]
    sys.path[1:1] = [entry for entry in added if entry not in sys.path]
    for folder in added:
        custom = os.path.join(folder, "sitecustomize.py")
        if os.path.exists(custom):
            spec = importlib.util.spec_from_file_location("sitecustomize", custom)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
            return


def _starts_otherwise(env: Mapping[str, str]) -> bool:
    """Whether the child's interpreter would start differently from the fork server's in a way a forked
    child cannot have: a PYTHON* variable of its own acts at interpreter start. A PYTHONPATH of its own
    is the exception when it only adds folders: `_start_up_path` does in the child what start-up does
    with them (one that drops a folder the fork server has cannot be undone in a fork)."""
    names = {k for k in (*env, *os.environ) if k.startswith("PYTHON") and k != "PYTHONPATH"}
    kept = set(env.get("PYTHONPATH", "").split(os.pathsep))
    dropped = any(entry and entry not in kept for entry in _SERVER_PYTHONPATH.split(os.pathsep))
    return dropped or any(env.get(k) != os.environ.get(k) for k in names)


class Forked(subprocess.Popen[bytes]):
    """The child as `subprocess.Popen` shows one, for `ticketiq.operate.launch.Child`: pid, poll, wait, signals."""

    def __init__(self, process: Any, stdout: IO[bytes] | None) -> None:  # no Popen.__init__: nothing to exec
        self._process = process
        self._child_created = False  # Popen.__del__ then leaves it alone
        self.args = []
        self.pid = process.pid
        self.returncode = None
        self.stdin = None
        self.stdout = stdout
        self.stderr = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


def popen(args: Sequence[str], *, env: Mapping[str, str], stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, env=, stdout=, stderr=)` as `ticketiq.operate.launch` calls it: stdout a log file
    or PIPE, stderr a log file or STDOUT. Any other command is run as a new interpreter, as before."""
    if list(args[1:3]) != list(_CLI) or args[0] != sys.executable or _starts_otherwise(env):
        return subprocess.Popen(args, env=env, stdout=stdout, stderr=stderr)
    argv = list(args[3:])
    reader: IO[bytes] | None = None
    writer: Connection | None = None
    if stdout == subprocess.PIPE:
        read_end, writer = _context.Pipe(duplex=False)
        reader = open(os.dup(read_end.fileno()), "rb", buffering=0)  # noqa: SIM115 (closed by Child)
        read_end.close()
        out: Connection | str = writer
    else:
        out = stdout.name
    err = None if stderr == subprocess.STDOUT else stderr.name
    # Daemonic: one a test left running is ended when its worker exits, not waited for.
    process = _context.Process(target=_run, args=(argv, dict(env), out, err), name=f"ticketiq {argv[0]}", daemon=True)
    process.start()
    if writer is not None:
        writer.close()
    return Forked(process, reader)


def run(args: Sequence[str], *, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(args, env=, capture_output=True, text=True, timeout=)`, the child started by popen()."""
    with tempfile.NamedTemporaryFile(prefix="ticketiq-stderr-") as errors:
        child = popen(args, env=env, stdout=subprocess.PIPE, stderr=errors)
        assert child.stdout is not None
        deadline = time.monotonic() + timeout
        out = b""
        try:
            while chunk := _read(child.stdout, deadline):
                out += chunk
            code = child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
            raise
        finally:
            child.stdout.close()
        return subprocess.CompletedProcess(list(args), code, out.decode(), errors.read().decode())


def _read(stream: IO[bytes], deadline: float) -> bytes:
    """The next bytes of the child's stdout; b"" at its end. Raises TimeoutExpired past the deadline."""
    left = deadline - time.monotonic()
    if left <= 0 or not select.select([stream], [], [], left)[0]:
        raise subprocess.TimeoutExpired("ticketiq", 0.0)
    return os.read(stream.fileno(), 65536)
