"""Imported last by the fork server (tests/support/preforked.py): what it imported is frozen, so a child
forked from it never scans it again. `ticketiq serve` collects and freezes its heap at start
(runtime/interpreter.py), which over the app's imports costs a child 0.1 s of CPU, and the collections
that come after would scan them too. A process started afresh does both as before."""

import gc

gc.collect()
gc.freeze()
