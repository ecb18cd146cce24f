"""`ticketiq`: serve an app process, run the stand-ins, manage the embedded database and the API's
tokens, run the demo; over the API, follow runs, jobs and approvals (`--url`, `--token`)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ticketiq.cli import ha, retention
from ticketiq.cli.client import Failed
from ticketiq.errors import Conflict, NotFound, TicketIQError
from ticketiq.runtime import interpreter, logs
from ticketiq.settings import Settings, seal_secrets

if TYPE_CHECKING:
    from ticketiq.auth.tokens import Role
    from ticketiq.storage.token_store import TokenStore

    NewToken = tuple[Role, tuple[str, ...] | None]  # its role and the agents it may start (None: every one)

CLI_ACTOR = "cli"  # the actor of the audit rows of `ticketiq tokens`: whoever may reach the database


def configure_logging(settings: Settings) -> None:
    secrets = [*settings.secrets(), *_home_password(settings), *_home_seal_keys(settings), *_mcp_secrets(settings)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logs.JsonLines(secrets) if settings.log_format == "json" else logging.Formatter(logs.TEXT_FORMAT)
    )
    handler.addFilter(logs.SecretFilter(secrets))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.log_level.upper())
    # A line per request is theirs to say at INFO (the MCP SDK's also names each session): ours say what matters.
    for chatty in ("httpx", "httpx2", "mcp"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    if settings.log_format == "json":
        logs.route_uncaught(logging.getLogger("ticketiq"))


def _mcp_secrets(settings: Settings) -> list[str]:
    """The MCP servers' header and environment values the agents file put in from ${VAR}s: never a log line.
    A file that cannot be read has none here; its error is said where it is checked."""
    from ticketiq.agents import catalog

    try:
        return [secret for spec in catalog.load(settings.agents).mcp_servers for secret in spec.secrets()]
    except Exception:
        return []


def _home_password(settings: Settings) -> list[str]:
    """The embedded server's password, once its home has one (a URL carries it, never a log line)."""
    from ticketiq.dbserver.embedded import password_path

    try:
        return [password_path(Path(settings.home)).read_text().strip()]
    except OSError:
        return []


def _home_seal_keys(settings: Settings) -> list[str]:
    """The seal key a process generated into its home (TICKETIQ_SEAL_KEYS unset), once there is one: its
    secrets as TICKETIQ_SEAL_KEYS's are (Settings.secrets)."""
    if settings.seal_keys:
        return []
    try:
        text = (Path(settings.home) / "seal.key").read_text().strip()
    except OSError:
        return []
    return seal_secrets(text)


def serve(settings: Settings, host: str, port: int) -> int:
    import uvicorn

    from ticketiq.entries.api import create_app
    from ticketiq.process import check_agents

    # Here, not in the app's start-up under uvicorn: there a bad file is a traceback and exit 3.
    check_agents(settings)

    app = create_app(settings, watch_stalls=True, freeze_start_up=True)
    interpreter.name_event_loop_thread()
    # uvloop: the C event loop the benchmarks measure; it cuts asyncio's cost per statement. httptools:
    # the C HTTP parser, a third of h11's CPU per request.
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=int(settings.shutdown_grace_s) + 1,
    )
    return 0


def db_command(settings: Settings, action: str, check: bool = False, file: str | None = None) -> int:
    from ticketiq.dbserver import authentication, embedded
    from ticketiq.dbserver.target import resolve

    if action in ("backup", "restore"):
        assert file is not None
        return _backup_or_restore(settings, action, Path(file))
    if action == "url":
        home = Path(settings.home)
        if settings.database_url and not embedded.names_home(home, settings.database_url):
            print(settings.database_url)  # another database: nothing of this home's to start
            return 0
        # The home's server, started if it is not running, stopped on purpose included: with
        # TICKETIQ_DATABASE_URL exported as the demo run by hand (docs/operate.md) does, that URL names it,
        # and the processes holding it wait for it on its port.
        target = resolve(dataclasses.replace(settings, database_url=None), keep=True)
        # With its password (kept 0600 in the home), printed on purpose for the home's owner: it works for
        # them and for no other user of the machine, who cannot read the password.
        server = target.server
        assert server is not None
        print(authentication.with_password(settings.database_url, server.password) if settings.database_url
              else target.url)  # fmt: skip
        return 0
    if action == "migrate":
        target = resolve(settings)
        try:
            return asyncio.run(_migrate(target.url, check))
        finally:
            target.release()
    if action == "stop":
        stopped = embedded.stop(Path(settings.home))
        print("stopped" if stopped else f"no embedded server was running in {Path(settings.home).resolve()}")
        return 0
    raise AssertionError(action)


def _backup_or_restore(settings: Settings, action: str, file: Path) -> int:
    """`ticketiq db backup FILE`: an online backup (pg_dump) of the database, while runs go on. `ticketiq db
    restore FILE`: into an empty one, every run it holds unfinished marked restored (I24; dbserver/backup.py)."""
    from ticketiq.dbserver import backup
    from ticketiq.dbserver.target import resolve

    target = resolve(settings)
    try:
        if action == "backup":
            print(backup.backup(target.url, file))
            return 0
        done = backup.restore(target.url, file)
    finally:
        target.release()
    print(f"restored {done.label} into {done.database}: {done.runs_restored} runs had not ended at the backup's "
          "point; each write they plan is read back or sent under its key before it is sent, or waits for "
          "`ticketiq runs resume`")  # fmt: skip
    return 0


async def _migrate(url: str, check: bool) -> int:
    """`ticketiq db migrate`: apply what is pending (as every process does at its start). `--check`: apply
    nothing; list what is pending, whether the previous release runs beside each, and the live processes
    of another release; exit 1 when a pending migration cannot run beside the previous release."""
    import psycopg
    from psycopg.rows import dict_row

    from ticketiq.storage import migrate

    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        if not check:
            done = await migrate.migrate(conn)
            print(
                "\n".join(f"applied {m.label}" for m in migrate.discover() if m.version in done) or "nothing to apply"
            )
            return 0
        pending, others = await migrate.check(conn)
    for m in pending:
        beside = (
            "the previous release runs beside it" if m.beside else f"CANNOT run beside the previous release: {m.why}"
        )
        print(f"pending {m.label}: {beside}")
    if not pending:
        print("nothing pending")
    for p in others:
        print(f"live    {p.id}: {p.release}")
    if pending and len(pending) == len(migrate.discover()):
        print("a new database: no release ran on it before, nothing runs beside these")
        return 0
    blocking = migrate.blockers(pending)
    if blocking and others:
        print("refused now: roll every process to this release first, or stop the others")
    return 1 if blocking else 0


def tokens_command(settings: Settings, args: argparse.Namespace) -> int:
    """`ticketiq tokens create|list|revoke`. Input is checked before the database is touched; a refusal
    is a RequestError, which `main` prints as one line with exit code 2, having written nothing."""
    from ticketiq.dbserver.target import resolve
    from ticketiq.storage import database
    from ticketiq.storage.token_store import TokenStore

    act = {"create": _create_token, "revoke": _revoke_token, "list": _list_tokens}[args.action]
    checked = _checked_token(settings, args) if args.action == "create" else None

    async def run() -> int:
        async with TokenStore.opened(target.url, database.ConnectionLimits.from_settings(settings)) as store:
            return await act(store, args, checked)

    target = resolve(settings)
    try:
        return asyncio.run(run())
    finally:
        target.release()


def _checked_token(settings: Settings, args: argparse.Namespace) -> NewToken:
    from ticketiq.agents import catalog
    from ticketiq.auth import tokens

    tokens.checked_name(args.name)
    role = tokens.checked_role(args.role)
    if args.agents is None:
        return role, None
    return role, tokens.checked_agents(args.agents.split(","), catalog.load(settings.agents).agents)


async def _create_token(store: TokenStore, args: argparse.Namespace, checked: NewToken | None) -> int:
    from ticketiq.auth import tokens

    assert checked is not None
    role, agents = checked
    token = tokens.mint()
    made = await store.create(args.name, role.value, agents, tokens.token_hash(token), CLI_ACTOR)
    if made is None:
        raise Conflict("name", f"a token named {args.name} exists; choose another name (names are never reused)")
    print(token, flush=True)  # stdout holds the token alone, for `TOKEN=$(ticketiq tokens create ...)`
    print(f"token {made.name} ({made.role}, {_agents(made.agents)}): shown this once and stored only as its "
          'SHA-256. Use it as: export TICKETIQ_TOKEN=<token>; curl -H "Authorization: Bearer $TICKETIQ_TOKEN" ...',
          file=sys.stderr)  # fmt: skip
    return 0


async def _revoke_token(store: TokenStore, args: argparse.Namespace, checked: NewToken | None) -> int:
    revoked = await store.revoke(args.name, CLI_ACTOR)
    if revoked is None:
        existing = await store.get(args.name)
        if existing is None:
            raise NotFound("name", f"no token named {args.name}; `ticketiq tokens list` shows the names")
        raise Conflict("name", f"token {args.name} was revoked already, at {_when(existing.revoked_at)}")
    print(f"revoked token {revoked.name}: requests with it are refused from now on")
    return 0


async def _list_tokens(store: TokenStore, args: argparse.Namespace, checked: NewToken | None) -> int:
    rows = [("NAME", "ROLE", "AGENTS", "CREATED", "REVOKED")]
    rows += [(t.name, t.role, _agents(t.agents), _when(t.created_at), _when(t.revoked_at)) for t in await store.every()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _agents(agents: tuple[str, ...] | None) -> str:
    return "*" if agents is None else ",".join(agents)


def _when(at: datetime | None) -> str:
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def jobs_command(settings: Settings, args: argparse.Namespace) -> int:
    from rich.console import Console

    from ticketiq.cli import jobs
    from ticketiq.cli.client import Target

    target = Target.of(args.api_url, args.api_token, settings)
    if args.action == "watch":
        return asyncio.run(jobs.watch(target, args.job_id, args.every, Console()))
    return asyncio.run(jobs.listed(target, args.status, args.kind, args.limit))


def client_command(settings: Settings, args: argparse.Namespace) -> int:
    """`runs` and `approvals`: over the API (cli/runs.py)."""
    from rich.console import Console

    from ticketiq.cli import runs

    command = runs.runs_command if args.command == "runs" else runs.approvals_command
    return command(settings, args, Console())


def settings_table(settings: Settings) -> int:
    print("| setting | default | what it does |\n| --- | --- | --- |")
    for name, default, doc in settings.describe():
        print(f"| `{name}` | `{default}` | {doc} |")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ticketiq")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _api_options(parser: argparse.ArgumentParser, default: str | None) -> None:
    """`--url` and `--token` of the commands over the API; given before the command or after it."""
    parser.add_argument("--url", dest="api_url", metavar="URL", default=default, help="the API (default: TICKETIQ_URL)")
    parser.add_argument(
        "--token",
        dest="api_token",
        metavar="TOKEN",
        default=default,
        help="the bearer token (default: TICKETIQ_TOKEN, which keeps it out of the process list)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ticketiq", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ticketiq {_version()}")
    _api_options(parser, None)
    # The same options after the command; SUPPRESS: absent there, the value before the command stands.
    api = argparse.ArgumentParser(add_help=False)
    _api_options(api, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="run an app process: HTTP API, run executor, lease renewer")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8080)
    p_stand = sub.add_parser("standins", help="run the model and vendor stand-ins; prints the settings first")
    p_stand.add_argument("--port", type=int, default=9000, help="0 picks a free port")
    p_stand.add_argument("--model-latency-ms", type=int, default=0)
    p_stand.add_argument("--position-ids", action="store_true", help="answer with call_0, call_1 ids")
    p_stand.add_argument(
        "--scripts",
        type=Path,
        metavar="DIR",
        help="a folder of model scripts of your own, <model>.yaml each (default: TICKETIQ_STANDIN_SCRIPTS)",
    )
    p_db = sub.add_parser("db", help="the embedded Postgres of TICKETIQ_HOME, or its HA formation (`db ha`)")
    db_actions = p_db.add_subparsers(dest="action", required=True)
    db_actions.add_parser(
        "url", help="print the embedded Postgres's URL, with the password kept in the home (pg.password), starting "
        "it if needed on the port the home keeps (it keeps running)"
    )  # fmt: skip
    p_migrate = db_actions.add_parser(
        "migrate", help="apply the pending migrations (every process does at its start); refused while one "
        "that the previous release cannot run beside is pending and a process of another release is live"
    )  # fmt: skip
    p_migrate.add_argument(
        "--check", action="store_true", help="apply nothing: list what is pending, whether the previous release "
        "runs beside each, and the live processes of another release; exit 1 when one cannot run beside it"
    )  # fmt: skip
    db_actions.add_parser(
        "stop", help="stop the embedded Postgres on purpose (the processes using it leave it stopped until `db url` "
        "starts it again)"
    )  # fmt: skip
    p_backup = db_actions.add_parser(
        "backup", help="an online backup (pg_dump, one consistent snapshot) of the database into FILE, while runs go on"
    )
    p_backup.add_argument("file", metavar="FILE")
    p_restore = db_actions.add_parser(
        "restore", help="restore FILE into an empty TICKETIQ_HOME (or empty database); every run not ended at the "
        "backup's point is marked restored: its writes are settled before they are sent (docs/operate.md)"
    )  # fmt: skip
    p_restore.add_argument("file", metavar="FILE")
    ha.add_parser(db_actions)
    p_tokens = sub.add_parser("tokens", help="bearer tokens of the HTTP API: create (shown once), list, revoke")
    actions = p_tokens.add_subparsers(dest="action", required=True)
    p_create = actions.add_parser("create", help="make a token; prints it once on stdout")
    p_create.add_argument("--name", required=True, help="the actor of what the token does; never reused")
    p_create.add_argument("--role", required=True, help="caller, operator or admin")
    p_create.add_argument("--agents", help="comma-separated agents it may start (default: every agent)")
    actions.add_parser("list", help="names, roles, agents, when made and revoked (never a token or hash)")
    p_revoke = actions.add_parser("revoke", help="refuse the token from now on")
    p_revoke.add_argument("--name", required=True)
    demo = sub.add_parser("demo", help="run the triage agent end to end against the stand-ins, then each entry point")
    demo.add_argument(
        "--keep", action="store_true", help="keep the stand-ins and the app running afterwards (Ctrl-C stops them)"
    )
    demo.add_argument("--port", type=int, default=None, help="the app's port (default: a free one)")
    p_cluster = sub.add_parser(
        "cluster", help="the stand-ins, N app processes and HAProxy in front of them (Ctrl-C stops them)"
    )
    p_cluster.add_argument(
        "action",
        nargs="?",
        choices=["roll"],
        help="roll: replace every app process of the cluster running on TICKETIQ_HOME, one at a time, with a "
        "process of the code installed now (as SIGHUP to its pid does); prints each step, exits 0 when every one "
        "was replaced and 1 when the roll stopped (the old process keeps serving)",
    )
    p_cluster.add_argument("--processes", type=int, default=2, help="app processes behind the edge")
    p_cluster.add_argument("--port", type=int, default=8080, help="the edge's port, on 127.0.0.1")
    p_cluster.add_argument(
        "--db",
        choices=["embedded", "ha"],
        default="embedded",
        help="embedded (default): TICKETIQ_DATABASE_URL, else the embedded Postgres of TICKETIQ_HOME. ha: the "
        "pg_auto_failover formation of TICKETIQ_HOME (primary + synchronous standby), started first if it is not "
        "up; it is left running when the cluster stops, as a database outlives its app processes (the next "
        "cluster starts at once on the same data; `ticketiq db ha down` stops it)",
    )
    retention.add_parser(sub)
    sub.add_parser("settings", help="print every TICKETIQ_* setting with its default")
    sub.add_parser(
        "doctor",
        help="check what is configured (database, seal keys, model and agents' models, vendor credentials, "
        "MCP servers and the tools the agents name on them), "
        "one line each; exit 0 when all is well, 1 otherwise",
    )
    p_jobs = sub.add_parser("jobs", help="background jobs over the API (--url, --token)")
    job_actions = p_jobs.add_subparsers(dest="action", required=True)
    p_watch = job_actions.add_parser(
        "watch", parents=[api], help="a job's progress bar until it ends, then its result; exit 0 when it succeeded"
    )
    p_watch.add_argument("job_id")
    p_watch.add_argument("--every", type=float, default=0.5, help="seconds between looks")
    p_jlist = job_actions.add_parser("list", parents=[api], help="jobs, newest first")
    p_jlist.add_argument("--status", default=None)
    p_jlist.add_argument("--kind", default=None)
    p_jlist.add_argument("--limit", type=int, default=50)
    _runs_parser(sub, api)
    _approvals_parser(sub, api)
    return parser


def _runs_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser) -> None:
    p_runs = sub.add_parser(
        "runs",
        help="runs over the API (--url, --token): list, show, watch, stop, resume, input; export (from the database)",
    )
    actions = p_runs.add_subparsers(dest="action", required=True)
    p_list = actions.add_parser("list", parents=[api], help="runs, newest first (a caller sees its own)")
    p_list.add_argument("--status", action="append", help="queued, running, waiting, ..., stopped; may repeat")
    p_list.add_argument("--agent")
    p_list.add_argument("--channel", help="api, a2a, copilot, cron, teams, webhook, ticket_event, workflow")
    p_list.add_argument("--created-by", dest="created_by", help="the token name that started the runs")
    p_list.add_argument("--since", help="created at or after this time (ISO 8601)")
    p_list.add_argument("--until", help="created before this time (ISO 8601)")
    p_list.add_argument("--search", help="text in the input or the answer")
    p_list.add_argument("--limit", type=int, default=None, help="at most this many (the API's default: 50)")
    p_list.add_argument("--cursor", help="the next page: the cursor the previous page gave")
    p_list.add_argument("--json", action="store_true", help="print the API's JSON")
    p_show = actions.add_parser("show", parents=[api], help="a run's timeline: attempts, steps, calls, settlement")
    p_show.add_argument("run_id")
    p_show.add_argument("--json", action="store_true", help="print the API's JSON")
    p_watch = actions.add_parser("watch", parents=[api], help="follow a run until it ends; exit 0 when it succeeded")
    p_watch.add_argument("run_id")
    actions.add_parser("stop", parents=[api], help="stop a run (operator)").add_argument("run_id")
    p_resume = actions.add_parser(
        "resume", parents=[api], help="let a restored run waiting for an operator go on: the writes it held (which "
        "could be neither read back nor deduped) are sent, the risk yours (operator; docs/operate.md)"
    )  # fmt: skip
    p_resume.add_argument("run_id")
    p_resume.add_argument("--reason", default=None, help="why, for the audit log")
    p_input = actions.add_parser("input", parents=[api], help="give a waiting run the input it asked for")
    p_input.add_argument("run_id")
    p_input.add_argument("text")
    p_input.add_argument("--question", help="the question it answers (default: the oldest pending one)")
    p_export = actions.add_parser(
        "export", help="write the runs that ended in [--since, --until) as JSON Lines, read from the database "
        "directly (no --url or --token): each line the run, its timeline, transcript and write ledger as the API "
        "shows them; prints how many to stderr"
    )  # fmt: skip
    when = "ISO 8601 (UTC when no offset) or a span back from now: 30d, 12h, 90m, 2w"
    p_export.add_argument("--since", required=True, help=f"ended at or after this time: {when}")
    p_export.add_argument("--until", required=True, help=f"ended before this time: {when}")
    p_export.add_argument(
        "--out", type=Path, metavar="FILE", help="the file, written whole or not at all; gzip when it ends .gz "
        "(default: stdout)"
    )  # fmt: skip


def _approvals_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser) -> None:
    p_approvals = sub.add_parser("approvals", help="calls held for a person's decision (operator): list, decide")
    actions = p_approvals.add_subparsers(dest="action", required=True)
    p_list = actions.add_parser("list", parents=[api], help="the approvals, pending ones by default")
    p_list.add_argument("--status", choices=["pending", "approved", "rejected", "withdrawn"], default="pending")
    p_list.add_argument("--limit", type=int, default=100)
    p_list.add_argument("--json", action="store_true", help="print the API's JSON")
    p_approve = actions.add_parser("approve", parents=[api], help="approve a held call: it is sent, the run goes on")
    p_approve.add_argument("approval_id")
    p_approve.add_argument("--reason", default="")
    p_reject = actions.add_parser("reject", parents=[api], help="reject a held call: the run goes on without it")
    p_reject.add_argument("approval_id")
    p_reject.add_argument("--reason", required=True, help="why, for the audit log and the run")


def one_line(message: str) -> str:
    """An error as one line on stderr: a YAML parser's message spans several, with a caret drawing."""
    return " ".join(message.split())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        configure_logging(settings)
        if args.command == "serve":
            return serve(settings, args.host, args.port)
        if args.command == "standins":
            from ticketiq.standins import server

            server.run(args.port, args.model_latency_ms, args.position_ids, settings, args.scripts)
            return 0
        if args.command == "db" and args.action == "ha":
            return ha.ha_command(settings, args)
        if args.command == "db":
            return db_command(
                settings, args.action, check=getattr(args, "check", False), file=getattr(args, "file", None)
            )
        if args.command == "tokens":
            return tokens_command(settings, args)
        if args.command == "demo":
            from ticketiq.cli.demo import run_demo
            from ticketiq.process import check_agents

            check_agents(settings)
            return run_demo(settings, keep=args.keep, port=args.port)
        if args.command == "cluster":
            from ticketiq.operate.cluster import ask_roll, run_cluster

            if args.action == "roll":
                return ask_roll(Path(settings.home))
            from ticketiq.process import check_agents

            check_agents(settings)  # before any process starts, not as each app process exits 2
            return run_cluster(settings, args.processes, args.port, db=args.db)
        if args.command == "settings":
            return settings_table(settings)
        if args.command == "doctor":
            from ticketiq.operate import doctor

            return doctor.run(settings)
        if args.command == "jobs":
            return jobs_command(settings, args)
        if args.command == "retention":
            return retention.command(settings, args)
        if args.command == "runs" and args.action == "export":
            from ticketiq.cli import export

            return export.runs_export(settings, args.since, args.until, args.out)
        if args.command in ("runs", "approvals"):
            return client_command(settings, args)
    except Failed as exc:  # a right command that did not succeed
        print(f"ticketiq: {exc}", file=sys.stderr)
        return 1
    except TicketIQError as exc:
        print(f"ticketiq: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `ticketiq settings | head`: the reader left; end quietly as a Unix filter does (128 + SIGPIPE).
        # Later writes (the interpreter's flush at exit) go nowhere rather than raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
