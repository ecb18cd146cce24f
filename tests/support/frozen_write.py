"""A process that sends one Jira comment (the real adapter, over the app's vendor transport) and freezes
itself with SIGSTOP at the `before_write` fault point: its connection is ready, its request's last check
and first byte are next. Whoever sends it SIGCONT lets it go on; it then prints what the send came to.

`python -m tests.support.frozen_write KEY ISSUE WINDOW_S LEASE` with the stand-ins' settings in the
environment. WINDOW_S: the write's budget from now. LEASE: `holds` (the lease deadline an hour off: only
the window can refuse) or `window` (the lease's local deadline ends with the window, as it does for a
process frozen past it). Prints one JSON line `{"window_ends": ...}` (the monotonic clock, which every
process on the host shares) before it sends, then one with the outcome or what was raised.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from ticketiq.engine.leases import HeldLease
from ticketiq.errors import LeaseLost
from ticketiq.runtime.faults import Faults
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, SendWindow
from ticketiq.tools.registry import build_registry
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport


def say(line: dict[str, object]) -> None:
    print(json.dumps(line), flush=True)


async def main(key: str, issue: str, window_s: float, lease: str) -> None:
    settings = Settings.from_env(dict(os.environ))
    tool = build_registry(settings).get("jira_add_comment")
    assert tool is not None
    transport = VendorTransport(2, faults=Faults("before_write", stop=True))
    async with VendorClient(transport, timeout=settings.http_timeout_s) as http:
        now = time.monotonic()
        window = SendWindow(budget_ends=now + window_s, lease_deadline=now + 3600.0)
        held = HeldLease("run-frozen", deadline=window.budget_ends if lease == "window" else now + 3600.0, since=now)
        ctx = CallContext("run-frozen", tool.name, {"issue_key": issue, "body": "frozen"}, key, http, settings,
                          before_send=held.check, window=window, lost=held.lost)  # fmt: skip
        say({"window_ends": window.budget_ends})
        try:
            outcome = await tool.executor(ctx)
        except LeaseLost as exc:
            say({"raised": "LeaseLost", "why": exc.why})
            return
        say({"ok": outcome.ok, "error": outcome.error, "uncertain": outcome.uncertain})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]))
