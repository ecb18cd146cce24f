"""`python -m ticketiq.cli`: how the operations room starts `ticketiq serve` and `ticketiq standins`."""

import sys

from ticketiq.cli.main import main

sys.exit(main())
