"""The User-Agent every outbound request of this process carries: the product, its version and this
process's pid and host. Vendors log it; the stand-ins record it with each write, so a trial can tell
which process made a call (a stalled process must make none once it is let go on)."""

from __future__ import annotations

import os
import socket
from importlib import metadata


def user_agent() -> str:
    try:
        version = metadata.version("ticketiq")
    except metadata.PackageNotFoundError:
        version = "dev"
    # Read at each call, not at import: a forked process has a pid of its own.
    return f"ticketiq/{version} pid/{os.getpid()} host/{socket.gethostname()}"
