"""`ticketiq`: serve an app process, run the stand-ins, manage the embedded database, run the demo."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ticketiq.errors import TicketIQError
from ticketiq.settings import Settings


class SecretFilter(logging.Filter):
    """Secrets never reach a log line, whatever code formatted it."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            if any(s in message for s in self.secrets):
                for s in self.secrets:
                    message = message.replace(s, "***")
                record.msg, record.args = message, None
        return True


def configure_logging(settings: Settings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter(settings.secrets()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from ticketiq.entries.api import create_app

    app = create_app(settings)
    # uvloop: the C event loop the benchmarks measure; it cuts asyncio's cost per statement.
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        loop="uvloop",
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 1,
    )
    return 0


def db_command(settings: Settings, action: str) -> int:
    from ticketiq.storage import database, embedded

    if action == "url":
        if settings.database_url:
            print(settings.database_url)
            return 0
        target = database.resolve(settings, keep=True)
        print(target.url)
        return 0
    if action == "stop":
        stopped = embedded.stop(Path(settings.home))
        print("stopped" if stopped else f"no embedded server was running in {Path(settings.home).resolve()}")
        return 0
    raise AssertionError(action)


def settings_table(settings: Settings) -> int:
    print("| setting | default | what it does |\n| --- | --- | --- |")
    for name, default, doc in settings.describe():
        print(f"| `{name}` | `{default}` | {doc} |")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ticketiq", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run an app process: HTTP API, run executor, lease renewer")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8080)
    p_stand = sub.add_parser("standins", help="run the model and vendor stand-ins; prints the settings first")
    p_stand.add_argument("--port", type=int, default=9000, help="0 picks a free port")
    p_stand.add_argument("--model-latency-ms", type=int, default=0)
    p_stand.add_argument("--position-ids", action="store_true", help="answer with call_0, call_1 ids")
    p_db = sub.add_parser("db", help="the embedded Postgres of TICKETIQ_HOME")
    p_db.add_argument(
        "action",
        choices=["url", "stop"],
        help="url: print its URL, starting it if needed (it keeps running); stop: stop it",
    )
    sub.add_parser("demo", help="run the triage agent end to end against the stand-ins")
    sub.add_parser("settings", help="print every TICKETIQ_* setting with its default")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        configure_logging(settings)
        if args.command == "serve":
            return serve(settings, args.host, args.port)
        if args.command == "standins":
            from ticketiq.standins import server

            server.run(args.port, args.model_latency_ms, args.position_ids, settings)
            return 0
        if args.command == "db":
            return db_command(settings, args.action)
        if args.command == "demo":
            from ticketiq.demo import run_demo

            return run_demo(settings)
        if args.command == "settings":
            return settings_table(settings)
    except TicketIQError as exc:
        print(f"ticketiq: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
