"""What `ticketiq serve` does to the interpreter once, for the CPU a run costs (issue 19's profile).

- `gc.freeze()` after start-up: every object made by then (modules, the agents catalog, the SQL, the
  pydantic and FastAPI models) lives as long as the process, yet each full collection scanned all of
  it. Frozen, a collection scans only what runs made.
- The event loop thread is named asyncio for sniffio: httpx and httpcore ask sniffio which library
  runs them on every request and lock, and without a name sniffio finds out through
  `asyncio.current_task()`, which on Python 3.11 costs a `getpid()` system call each time (3% of an
  app process's CPU). The name is what sniffio documents for a thread whose library is known; it is
  set on this thread only, so a worker thread still finds out for itself.
"""

from __future__ import annotations

import gc

import sniffio


def name_event_loop_thread() -> None:
    """Before the loop starts, on the thread it will run on."""
    sniffio.thread_local.name = "asyncio"


def freeze_start_up() -> None:
    """After start-up: what exists now is never collected."""
    gc.collect()
    gc.freeze()
