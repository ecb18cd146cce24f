"""Run the stand-ins as a process: print the settings that point an app process at them, then serve.

The settings come first on stdout, one `KEY=value` per line, flushed, so a launcher can read them
before anything else; the port is already listening by then, so a request sent at once waits in the
backlog until the app has started instead of being refused.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

import uvicorn

from ticketiq.dbserver.target import resolve
from ticketiq.settings import Settings
from ticketiq.standins.app import create_app
from ticketiq.standins.model import load_own_scripts
from ticketiq.standins.vendors import botframework

# The Microsoft App ID the stand-ins' Teams activities are addressed to (their tokens' audience).
STANDIN_BOT_APP_ID = botframework.APP_ID
# How long the stand-ins keep an idle connection open. Real vendors sit behind load balancers that close
# idle connections after 60 s or more, and our pools close theirs first, at 50 s
# (tools/vendor_pool.KEEPALIVE_S; httpx's clients at 5 s). With uvicorn's default 5 s, the stand-ins
# closed connections as clients reused them: a request could go out on a socket the server was closing
# (a ReadError in a make test run).
IDLE_S = 75


def settings_env(base_url: str, database_url: str | None = None) -> dict[str, str]:
    """The settings that point an app process at stand-ins serving at `base_url`."""
    env = {
        "TICKETIQ_MODEL_BASE_URL": f"{base_url}/v1",
        "TICKETIQ_INCIDENTIO_URL": f"{base_url}/incidentio",
        "TICKETIQ_JIRA_URL": f"{base_url}/jira",
        "TICKETIQ_TEAMS_SERVICE_URL": f"{base_url}/teams",
        "TICKETIQ_GRAPH_URL": f"{base_url}/graph/v1.0",
        "TICKETIQ_DISCORD_URL": f"{base_url}/discord/api/v10",
        "TICKETIQ_SQS_URL": f"{base_url}/sqs",
        "TICKETIQ_REMOTE_AGENT_URL": f"{base_url}/a2a-agent",
        # The stand-in Bot Framework token service, and the app id the stand-ins' activities are for.
        "TICKETIQ_TEAMS_JWKS_URL": f"{base_url}/_standin/botframework/jwks",
        "TICKETIQ_TEAMS_APP_ID": STANDIN_BOT_APP_ID,
        # The bot's own credentials, and where it buys its Bot Connector and Graph tokens with them. The
        # password is the stand-in app's, not a secret: it opens only these stand-ins.
        "TICKETIQ_TEAMS_APP_PASSWORD": botframework.APP_PASSWORD,
        "TICKETIQ_TEAMS_TOKEN_URL": f"{base_url}/login/botframework.com/oauth2/v2.0/token",
        "TICKETIQ_GRAPH_TOKEN_URL": f"{base_url}/login/standin-tenant/oauth2/v2.0/token",
        # The stand-in MCP server: no setting of the app's, a value an agents file names
        # (`url: ${TICKETIQ_STANDIN_MCP_URL:-...}`, as the sample does).
        "TICKETIQ_STANDIN_MCP_URL": f"{base_url}/mcp",
        # Printed last of the vendors: launchers read up to it (launch.STANDIN_KEYS).
        "TICKETIQ_WEBHOOK_URL": f"{base_url}/webhook",
    }
    if database_url:
        env["TICKETIQ_DATABASE_URL"] = database_url
    return env


def listen(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def run(
    port: int, model_latency_ms: int, position_ids: bool, settings: Settings, own_scripts: Path | None = None
) -> None:
    """`own_scripts`: a folder of model scripts of your own (default TICKETIQ_STANDIN_SCRIPTS)."""
    own_scripts = own_scripts or settings.standin_scripts
    if own_scripts is not None:
        load_own_scripts(own_scripts)  # a bad folder or script is refused before anything starts
    target = resolve(settings)
    try:
        sock = listen(port)
        base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        # Not the database's URL: it carries the password, and this output is kept in files (a cluster's
        # logs, the standins.env of the demo run by hand in docs/operate.md); an app process is given that
        # URL as the stand-ins were.
        for key, value in settings_env(base_url).items():
            print(f"{key}={value}")
        sys.stdout.flush()
        app = create_app(target.url, model_latency_ms=model_latency_ms, position_ids=position_ids,
                         server=target.server, own_scripts=own_scripts)  # fmt: skip
        # log_config None: uvicorn's records go to the handler `ticketiq` configured (its format, TICKETIQ_LOG_FORMAT
        # included, and secrets scrubbed), not to a handler and format of uvicorn's own.
        config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, ws="none",
                                lifespan="on", timeout_keep_alive=IDLE_S)  # fmt: skip
        # uvicorn shuts down on SIGTERM/SIGINT and then re-raises the signal to the handler it found:
        # a quiet one lets this function return and release the embedded database.
        previous = {sig: signal.signal(sig, _quiet) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            uvicorn.Server(config).run(sockets=[sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            sock.close()
    finally:
        target.release()


def _quiet(signum: int, frame: FrameType | None) -> None:
    """Stand-in for the default handlers while uvicorn serves: it does the shutting down."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ticketiq.standins.server", description=__doc__)
    parser.add_argument("--port", type=int, default=9000, help="0 picks a free port")
    parser.add_argument("--model-latency-ms", type=int, default=0)
    parser.add_argument("--position-ids", action="store_true")
    parser.add_argument("--scripts", type=Path, default=None, help="a folder of model scripts of your own")
    args = parser.parse_args(argv)
    run(args.port, args.model_latency_ms, args.position_ids, Settings.from_env(), args.scripts)


if __name__ == "__main__":
    main()
