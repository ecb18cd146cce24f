"""A process frozen (SIGSTOP) at the last instant before a write's first byte, and let go on (SIGCONT)
only after the write's window closed, sends nothing (I3, I14): the survivor that read the write back
absent and sent it once is the only sender. Before the last check ran in the socket write's own call
stack, such a process sent the comment late, and the vendor took it twice (make evidence's stop mode)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.standins import Standins
from ticketiq.tools.base import CallContext
from ticketiq.tools.registry import build_registry
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport

ROOT = Path(__file__).resolve().parents[2]
WINDOW_S = 1.0


def state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


async def stopped(pid: int) -> None:
    """Until the process is stopped: it froze itself at its fault point."""
    while state(pid) not in ("T", "t"):
        await asyncio.sleep(0.02)


async def line_of(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    assert proc.stdout is not None
    raw = await asyncio.wait_for(proc.stdout.readline(), 30.0)
    assert raw, "the child ended without saying anything"
    said: dict[str, Any] = json.loads(raw)
    return said


@pytest.mark.parametrize("lease", ["holds", "window"])
async def test_a_write_frozen_before_its_first_byte_and_let_go_on_after_its_window_sends_nothing(
    standins: Standins, lease: str
) -> None:
    key = f"tqfrozen{lease}"
    env = {**os.environ, **standins.settings_env, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.support.frozen_write", key, "OPS-1", str(WINDOW_S), lease,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        window_ends = (await line_of(proc))["window_ends"]
        await asyncio.wait_for(stopped(proc.pid), 30.0)
        # The survivor waits the window out (I14) before it reads back, as a takeover does.
        await asyncio.sleep(max(0.0, window_ends - time.monotonic()) + 0.05)
        settings = standins.settings()
        tool = build_registry(settings).get("jira_add_comment")
        assert tool is not None and tool.reader is not None
        async with VendorClient(VendorTransport(2)) as http:
            ctx = CallContext("run-frozen", tool.name, {"issue_key": "OPS-1", "body": "frozen"}, key, http, settings)
            assert (await tool.reader(ctx)).found is False
            assert (await tool.executor(ctx)).ok  # sent once, as the settlement does
        os.kill(proc.pid, signal.SIGCONT)
        said = await line_of(proc)
        assert await asyncio.wait_for(proc.wait(), 30.0) == 0
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            await proc.wait()
    # The frozen process let go on sent nothing (the vendor took the comment once), refused by its window,
    # or by its lease as well.
    writes = await standins.writes(vendor="jira", key=key)
    assert len(writes) == 1, writes
    if lease == "holds":
        assert said == {"ok": False, "error": said["error"], "uncertain": False}
        assert "budget was spent before its bytes could leave" in said["error"]
    else:
        assert said == {"raised": "LeaseLost", "why": "local lease deadline passed before renewal"}
