"""A rolling deploy of the cluster's app processes: each in turn is replaced by a process of the code
installed now, with no request through the edge failing and no run waiting for a lease to lapse.

For each app process: start the new one on a free port and wait until its /readyz answers; tell the edge
to drain the old one (no new requests reach it, those in flight finish) and, once it has none open, point
the slot at the new one and take it back into rotation; then SIGTERM the old one, which hands each run
over at its next step boundary to a live process (process.py `stop`), and wait until it exited. A new
process that is never ready stops the roll there: the old one keeps serving, and the roll fails with the
reason, so a broken release never reaches the whole cluster.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ticketiq.operate.edge_admin import EdgeAdmin
from ticketiq.operate.launch import Child, free_port, probe_client, ready, spawn_serve
from ticketiq.operate.slots import READY_WITHIN_S, Slot
from ticketiq.operate.supervise import Life

DRAINED_WITHIN_S = 30.0  # the edge's longest request (timeout server 60 s) is rare; a roll waits this long
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Rolled:
    ok: bool
    reason: str = ""


def roll(slots: Sequence[Slot], admin: EdgeAdmin, say: Callable[[str], None], grace_s: float) -> Rolled:
    """Replace every app process that is not left down, one at a time."""
    began = time.monotonic()
    for slot in slots:
        if slot.down:
            say(f"{slot.name}: left down after a crash loop; not rolled")
            continue
        failed = _replace(slot, admin, say, grace_s)
        if failed is not None:
            return Rolled(False, failed)
    say(f"rolled {sum(1 for s in slots if not s.down)} app processes in {time.monotonic() - began:.1f} s")
    return Rolled(True)


def _replace(slot: Slot, admin: EdgeAdmin, say: Callable[[str], None], grace_s: float) -> str | None:
    old = slot.child
    port = free_port()
    started = time.monotonic()
    new, base = spawn_serve(slot.env, slot.logs, port=port, name=slot.name)
    say(f"{slot.name}: started pid {new.pid} on {base} (replacing pid {old.pid})")
    why = _wait_ready(new, base)
    if why is not None:
        new.kill()
        return f"{slot.name}: the new process {why}; the roll stops here and pid {old.pid} keeps serving"
    say(f"{slot.name}: pid {new.pid} ready in {time.monotonic() - started:.1f} s")
    admin.drain(slot.name)
    drained = _wait_drained(admin, slot.name)
    late = "" if drained else f" (requests still open after {DRAINED_WITHIN_S:.0f} s: they finish on it)"
    say(f"{slot.name}: the edge drained pid {old.pid}{late}")
    admin.point(slot.name, HOST, port)
    admin.ready(slot.name)
    slot.child, slot.port = new, port
    # A start again the watch had pending (the old one had died) is done by this one.
    slot.restart_at, slot.starting = None, False
    slot.lives.append(Life(started))
    say(f"{slot.name}: the edge sends its requests to pid {new.pid}")
    handing = time.monotonic()
    if old.proc.poll() is None:
        old.proc.send_signal(signal.SIGTERM)
    try:
        rc = old.proc.wait(grace_s + 15)
    except subprocess.TimeoutExpired:
        old.kill()
        say(f"{slot.name}: pid {old.pid} did not exit within {grace_s + 15:.0f} s and was killed")
        return None
    say(f"{slot.name}: pid {old.pid} handed its runs over and exited (code {rc}) in "
        f"{time.monotonic() - handing:.1f} s")  # fmt: skip
    return None


def _wait_ready(child: Child, base: str) -> str | None:
    deadline = time.monotonic() + READY_WITHIN_S
    with probe_client() as client:
        while time.monotonic() < deadline:
            rc = child.proc.poll()
            if rc is not None:
                return f"exited with code {rc} before it was ready (see {child.log_path})"
            if ready(client, base):
                return None
            time.sleep(0.1)
    return f"was not ready within {READY_WITHIN_S:.0f} s (see {child.log_path})"


def _wait_drained(admin: EdgeAdmin, server: str) -> bool:
    deadline = time.monotonic() + DRAINED_WITHIN_S
    while time.monotonic() < deadline:
        if admin.sessions(server) == 0:
            return True
        time.sleep(0.05)
    return False
