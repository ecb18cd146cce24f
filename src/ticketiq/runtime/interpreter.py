"""What `ticketiq serve` does to the interpreter once, for the CPU a run costs (issue 19's profile).

- `gc.freeze()` after start-up: every object made by then (modules, the agents catalog, the SQL, the
  pydantic and FastAPI models) lives as long as the process, yet each full collection scanned all of
  it. Frozen, a collection scans only what runs made.
- The young generation collected after 10,000 new objects rather than 700: a run's objects, and a vendor
  request's, go by reference count as they end (nothing of ours is left in a cycle), so the young
  generation's count rises only with what is alive at once; at 700, 32 runs in flight made 15-22
  collections a second that found nothing to free and moved what was alive on to the older generations,
  2.9-7.1% of the app's CPU while runs went (bench/client.py's load, measured by `gc.callbacks`); at
  10,000 none in the same load, 0-1.8%. Garbage a library leaves in a cycle waits for at most that many
  new objects: a few MB.
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


YOUNG_THRESHOLD = 10_000


def freeze_start_up() -> None:
    """After start-up: what exists now is never collected, and the young generation is collected rarely."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
