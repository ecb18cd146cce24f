"""Imported last by the fork server (tests/support/preforked.py): what a child would make once a process
is made here once, and what the server imported is frozen, so a child forked from it never scans it
again. `ticketiq serve` collects and freezes its heap at start (runtime/interpreter.py), which over the
app's imports costs a child 0.1 s of CPU, and the collections that come after would scan them too. A
process started afresh does all of it as before."""

import gc

from ticketiq.standins.vendors import botframework
from ticketiq.tools import vendor_pool

# Made once a process, and each child would make its own: the verifying TLS context of the vendor pools
# (some 20-30 ms of CPU) and the stand-in Bot Framework key (an RSA key, 50-100 ms).
vendor_pool._verified()
botframework._made_pem()

gc.collect()
gc.freeze()
