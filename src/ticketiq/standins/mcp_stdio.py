"""The stand-in MCP server over stdio: the notebook's tools (vendors/mcp_notes.py), recording into the
stand-ins' store on `--database-url` (or TICKETIQ_STANDIN_DATABASE_URL), so that its calls show in
/_standin/writes of a stand-in app on that database.

    python -m ticketiq.standins.mcp_stdio --database-url postgresql://...

stdout is the protocol: logs go to stderr only. Faults are a stand-in app's (in its memory), so none apply
here; the extra tool is not offered.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from ticketiq.errors import TicketIQError
from ticketiq.settings import Settings
from ticketiq.standins.records import CLIENT, Store
from ticketiq.standins.vendors.intake import Intake, StandinOptions
from ticketiq.standins.vendors.mcp_notes import notebook_server

# What the write log names as the client of a call made over stdio (there is no User-Agent).
STDIO_CLIENT = "mcp-stdio"

log = logging.getLogger(__name__)


async def serve(database_url: str) -> None:
    store = Store(database_url, min_size=1, max_size=4)
    await store.open()
    try:
        server, _ = notebook_server(Intake(store, StandinOptions()))
        CLIENT.set(STDIO_CLIENT)
        await server.run_stdio_async()
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ticketiq.standins.mcp_stdio", description=__doc__)
    parser.add_argument("--database-url", default=None, help="default: TICKETIQ_STANDIN_DATABASE_URL")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        database_url = args.database_url or Settings.from_env().standin_database_url
        if not database_url:
            parser.error("--database-url (or TICKETIQ_STANDIN_DATABASE_URL) is required")
        anyio.run(serve, database_url)
    except TicketIQError as exc:
        print(f"mcp_stdio: {exc}", file=sys.stderr)  # never the URL: it carries the password
        sys.exit(1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
