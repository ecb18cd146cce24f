"""`ticketiq cluster` as a test runs it: its environment, the real CLI started with its output read line by
line, its parts' pids read from what it prints, and its end (SIGINT, as a person stops it; then anything it
left, by pid). The edge and roll tests, and the kill trials' `roll` mode, start theirs here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil


def cluster_env(tmp_path: Path, db_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    env["TICKETIQ_HOME"] = str(tmp_path / "home")
    env["TMPDIR"] = str(tmp_path)  # where the cluster's logs folder goes
    if db_url is not None:
        env["TICKETIQ_DATABASE_URL"] = db_url
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "ticketiq.cli", *args]


def read_until(proc: subprocess.Popen[str], lines: list[str], marker: str, timeout_s: float) -> None:
    """Read the process's stdout into `lines` until a line holds `marker`."""
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: _read(proc, lines, marker), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert any(marker in line for line in lines), f"no {marker!r} within {timeout_s} s:\n{''.join(lines)}"


def _read(proc: subprocess.Popen[str], lines: list[str], marker: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if marker in line:
            return


def pids(lines: list[str]) -> dict[str, int]:
    """Each part's name and pid, from lines like `app1      pid 123: http://...`."""
    found: dict[str, int] = {}
    for line in lines:
        words = line.split()
        if len(words) >= 3 and words[1] == "pid":
            found[words[0]] = int(words[2].rstrip(":"))
    return found


def end_leftover(pid: int) -> None:
    """SIGKILL a part the cluster left running, once sure the pid is still that part, not a reused pid."""
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        if process.name() == "haproxy" or "ticketiq.cli" in process.cmdline():
            process.kill()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def launch_cluster(env: dict[str, str], port: int) -> tuple[subprocess.Popen[str], list[str]]:
    """`ticketiq cluster --processes 2` on `port`, once it says it runs; its output keeps coming into the
    returned lines (a reader thread, to its end). Ended here if it never says so."""
    proc = subprocess.Popen(cli("cluster", "--processes", "2", "--port", str(port)), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    lines: list[str] = []
    try:
        # Postgres, the stand-ins, two app processes one after the other and the edge: over 120 s once, in a make
        # test on a loaded 2-core machine.
        read_until(proc, lines, "running;", 240)
    except BaseException:
        end_cluster(proc, lines, [])
        raise
    threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
    return proc, lines


def end_cluster(proc: subprocess.Popen[str], lines: list[str], also: list[int]) -> None:
    """After a cluster test, passed or not: a cluster still running is stopped as a person stops it (SIGINT:
    it stops everything it started, the processes a roll started included), killed only if it does not go;
    then any part it named (or `also`) that is somehow left is killed by its pid."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()
    for pid in [*pids(lines).values(), *also]:
        end_leftover(pid)


def wait_for_count(lines: list[str], marker: str, count: int, timeout_s: float) -> None:
    """Wait until `count` of the lines a reader thread appends hold `marker`."""
    deadline = time.monotonic() + timeout_s
    while sum(marker in line for line in list(lines)) < count:
        assert time.monotonic() < deadline, f"{marker!r} not seen {count} times:\n{''.join(lines)}"
        time.sleep(0.05)
