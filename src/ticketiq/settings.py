"""Every TICKETIQ_* setting, typed, with its default. The settings table of docs/reference.md mirrors this list.

Nothing else in the package reads the environment: code takes a `Settings` and reads its fields.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ticketiq.errors import ConfigError

T = TypeVar("T")

_SAMPLE_AGENTS = Path(__file__).parent / "agents" / "sample.yaml"
# Idempotency-Keys are kept at least this long (issue 7).
IDEMPOTENCY_TTL_FLOOR_S = 86400.0
CRON_MISSED = ("latest", "skip")  # values.schedules.Missed
LOG_FORMATS = ("text", "json")  # runtime/logs.py
_SCRUBBED_PASSWORD_MIN = 16
_SCRUBBED_SEAL_MIN = 8


class Duration(float):
    """A length of time in seconds, written `90s`, `15m`, `12h` or `30d` (a bare number is seconds). For a
    retention policy `0` means keep for ever (`forever`)."""

    UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

    @classmethod
    def parse(cls, raw: str) -> Duration:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", raw.lower())
        if found is None:
            raise ValueError("write a duration as a number and a unit: 90s, 15m, 12h or 30d (0 keeps for ever)")
        return cls(float(found.group(1)) * cls.UNITS[found.group(2) or "s"])

    @property
    def forever(self) -> bool:
        return float(self) == 0.0

    def __str__(self) -> str:
        for unit in ("d", "h", "m"):
            size = self.UNITS[unit]
            if self and self % size == 0:
                return f"{int(self // size)}{unit}"
        return f"{self:g}s"


def _setting(default: Any, doc: str, secret: bool = False) -> Any:
    return field(default=default, metadata={"doc": doc, "secret": secret})


@dataclass(frozen=True)
class Settings:
    home: Path = _setting(
        Path(".ticketiq"),
        "Data folder: the embedded Postgres and its password (pg.password, 0600), the generated seal key.",
    )
    database_url: str | None = _setting(
        None, "Postgres to use. Unset: an embedded server in TICKETIQ_HOME, shared by its processes."
    )
    db_pool_min: int = _setting(2, "Connections the pool keeps open.")
    db_pool_max: int = _setting(20, "Connections the pool opens at most.")
    db_connect_timeout_s: float = _setting(5.0, "Bound on opening one database connection, seconds.")
    db_statement_timeout_s: float = _setting(
        15.0,
        "Bound on one statement: the server cancels it (statement_timeout) and the client gives up on it a "
        "little later, so a hung connection never holds a request or a run.",
    )
    db_keepalive_s: float = _setting(
        5.0, "TCP keepalive idle time of every database connection; a silent peer is dropped about 3x later."
    )

    model_base_url: str = _setting("http://127.0.0.1:9000/v1", "Chat-completions endpoint (OpenAI protocol).")
    model: str = _setting("gpt-4o-mini", "Model for agents that name none.")
    model_api_key: str = _setting("unset", "API key for the model endpoint.", secret=True)
    model_timeout_s: float = _setting(60.0, "Bound on one model request, seconds.")
    model_max_retries: int = _setting(4, "Retries of a model request answered 429 or 5xx.")
    model_connections: int = _setting(
        1000,
        "Connections to the model endpoint open at once, at most (the openai client's own default); all of them "
        "may stay open idle (50 s). One a model step in flight: a process holding a thousand runs that wait on "
        "the model keeps a thousand open.",
    )

    agents: Path = _setting(_SAMPLE_AGENTS, "Agents file (YAML); the sample ships with the package.")
    standin_scripts: Path | None = _setting(
        None,
        "`ticketiq standins`: a folder of model scripts of your own (`<model>.yaml`, the format of "
        "standins/scripts/), besides the shipped ones; `--scripts` overrides it.",
    )
    standin_database_url: str | None = _setting(
        None,
        "The stand-in MCP server over stdio (`python -m ticketiq.standins.mcp_stdio`): the Postgres of the stand-ins "
        "whose write log records its calls; `--database-url` overrides it.",
        secret=True,
    )
    seal_keys: str | None = _setting(
        None,
        "Checkpoint seal keys `id:secret,...`: the first signs, all verify. "
        "Unset: a key generated into TICKETIQ_HOME (mode 0600).",
        secret=True,
    )

    lease_ttl_s: float = _setting(8.0, "Run lease time to live, judged by the database clock.")
    lease_renew_s: float = _setting(2.0, "Interval of the one renewal statement for all of a process's leases.")
    lease_margin_s: float = _setting(
        1.0, "No write is sent later than last renewal sent + TTL - this margin (local monotonic clock)."
    )
    call_concurrency: int = _setting(4, "Calls of one step made at once, at most.")
    http_timeout_s: float = _setting(15.0, "Bound on one vendor request, seconds.")
    mcp_start_wait_s: float = _setting(
        10.0,
        "At start, how long to wait for the agents file's MCP servers to answer and list their tools (in all). "
        "A server that has not answered by then is looked for again in the background; the process starts anyway.",
    )
    write_budget_s: float = _setting(
        10.0,
        "A write's whole budget: its tries, their timeouts and backoff. An in-doubt write is read back only "
        "once the budget from its mark is spent (I14).",
    )
    vendor_max_retries: int = _setting(3, "Retries of a vendor request answered 429 or 5xx.")
    vendor_connections: int = _setting(
        100,
        "Connections to one vendor host (scheme, host, port) open at once, at most; all of them may stay open "
        "idle (50 s) for the next request. Sized to the vendor calls a process has in flight, so connections "
        "are reused, not closed and opened again. A request finding all of them busy waits, at most its "
        "TICKETIQ_HTTP_TIMEOUT_S, for one to come free; then the vendor counts as not reached (nothing sent).",
    )

    incidentio_url: str = _setting("http://127.0.0.1:9000/incidentio", "incident.io API base URL.")
    incidentio_api_key: str = _setting("unset", "incident.io API key.", secret=True)
    jira_url: str = _setting("http://127.0.0.1:9000/jira", "Jira Cloud base URL.")
    jira_token: str = _setting(
        "unset",
        "Jira API token. With TICKETIQ_JIRA_EMAIL it goes out as Basic auth (Jira Cloud's API tokens); "
        "without, as a Bearer token (a Jira Data Center personal access token).",
        secret=True,
    )
    jira_email: str | None = _setting(
        None,
        "The Atlassian account's email that TICKETIQ_JIRA_TOKEN belongs to (Jira Cloud: Basic auth). Unset: "
        "the token is sent as Bearer (Jira Data Center).",
    )
    teams_service_url: str = _setting("http://127.0.0.1:9000/teams", "Bot Framework serviceUrl for replies.")
    teams_app_id: str | None = _setting(
        None,
        "The bot's Microsoft App ID: the audience every Bot Framework token sent to POST /v1/teams/messages "
        "must name, and the client id the bot's own tokens are bought with. Unset: the Teams inbox takes no "
        "activity (503).",
    )
    teams_app_password: str | None = _setting(
        None,
        "The bot's app password (its client secret): with TICKETIQ_TEAMS_APP_ID it buys the tokens Teams "
        "replies (Bot Connector) and their read-back (Graph) send, by the OAuth 2.0 client-credentials grant. "
        "Unset: no reply is sent (its outcome says why).",
        secret=True,
    )
    teams_token_url: str = _setting(
        "http://127.0.0.1:9000/login/botframework.com/oauth2/v2.0/token",
        "Where the Bot Connector's tokens are bought; in production "
        "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token (a single-tenant bot: its "
        "tenant id in place of botframework.com).",
    )
    teams_token_scope: str = _setting(
        "https://api.botframework.com/.default", "The scope the Bot Connector's tokens are bought for."
    )
    teams_jwks_url: str = _setting(
        "http://127.0.0.1:9000/_standin/botframework/jwks",
        "The Bot Framework token service's signing keys (JWKS), cached 5 minutes; in production "
        "https://login.botframework.com/v1/.well-known/keys.",
    )
    teams_issuer: str = _setting("https://api.botframework.com", "The issuer Bot Framework tokens must name.")
    teams_agent: str = _setting("triage", "The agent a Teams message starts a turn of.")
    teams_dedupe_s: float = _setting(
        60.0,
        "A Teams activity with the same conversation, replyToId, sender and text as one received this recently "
        "is a redelivery (Teams may resend under a new id): it is stored and started no second time.",
    )
    public_url: str | None = _setting(
        None,
        "This service's public base URL, for links it posts (a Teams reply's link to the run's console page). "
        "Unset: the base URL the activity came in by.",
    )
    console_session_ttl_s: float = _setting(
        43200.0,
        "How long a console sign-in lasts (seconds; a shift): then the person pastes a token again. Revoking "
        "the token ends its sessions at once.",
    )
    max_streams_per_principal: int = _setting(
        20,
        "Event streams (GET /v1/runs/{id}/events) and long waits one principal (a token, with the console sessions "
        "signed in with it) holds open on this process at once, at most; one more is answered 429 with Retry-After.",
    )
    max_streams: int = _setting(
        1000,
        "Event streams and long waits this process holds open at once, whoever holds them, at most; one more is "
        "answered 429 with Retry-After.",
    )
    trace_url: str | None = _setting(
        None,
        "A run's trace in your tracing UI, `{trace_id}` replaced by the run's trace id (e.g. "
        "http://jaeger:16686/trace/{trace_id}): the console's run page links to it. Traces are sent only when "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md).",
    )
    max_waiters: int = _setting(
        1000,
        "Requests waiting on a run at once on this process (GET /v1/runs/{id}?wait=S), at most; one more is "
        "answered at once, with the run as it is and Retry-After.",
    )
    stream_max_s: float = _setting(
        300.0,
        "How long one event stream lasts, seconds; then it ends and the client reconnects with Last-Event-ID, "
        "losing nothing.",
    )
    graph_url: str = _setting("http://127.0.0.1:9000/graph/v1.0", "Microsoft Graph base URL (reply read-back).")
    graph_token_url: str = _setting(
        "http://127.0.0.1:9000/login/standin-tenant/oauth2/v2.0/token",
        "Where Graph tokens for the reply read-back are bought (the bot's app id and password); in production "
        "https://login.microsoftonline.com/<the team's tenant id>/oauth2/v2.0/token.",
    )
    graph_token_scope: str = _setting("https://graph.microsoft.com/.default", "The scope Graph tokens are bought for.")
    discord_url: str = _setting("http://127.0.0.1:9000/discord/api/v10", "Discord API base URL.")
    discord_token: str = _setting("unset", "Discord bot token.", secret=True)
    sqs_url: str = _setting("http://127.0.0.1:9000/sqs", "SQS endpoint (AWS JSON protocol).")
    sqs_token: str = _setting("unset", "SQS credential (stand-in bearer).", secret=True)
    webhook_url: str = _setting("http://127.0.0.1:9000/webhook", "Generic webhook target.")
    webhook_dedupe_window_s: float = _setting(
        0.0, "How long the webhook target says it honours Idempotency-Key; 0: not at all."
    )
    remote_agent_url: str = _setting(
        "http://127.0.0.1:9000/a2a-agent",
        "Base URL of the remote A2A agent `ask_remote_agent` talks to (its card at /.well-known/agent-card.json).",
    )
    remote_agent_wait_s: float = _setting(
        300.0,
        "How long a call to a remote A2A agent (and its read-back on resume) follows the remote task once the "
        "message is sent, while the run's lease holds.",
    )

    sweep_interval_s: float = _setting(
        3.0,
        "How often the leader looks for lapsed run leases (I5), at the least: sooner when a held lease is "
        "about to lapse.",
    )
    db_back_grace_s: float = _setting(
        3.0,
        "After the database came back (a failover, a restart), how long the leader waits before it judges "
        "any process dead: every process re-takes its liveness mark meanwhile.",
    )
    liveness_poll_s: float = _setting(
        0.25,
        "How often the leader looks for processes whose liveness mark is free (and each process at its own).",
    )
    max_losses: int = _setting(2, "A run lost more often than this is failed with the reason (I7).")
    queued_grace_s: float = _setting(5.0, "A queued run no process took within this long is taken by the sweep.")
    lead: bool = _setting(True, "Whether this process stands for leader (sweeps); any process executes runs.")
    delegation_wait_s: float = _setting(600.0, "How long a delegating call waits for its child run's answer.")
    shutdown_grace_s: float = _setting(
        10.0, "On SIGTERM, how long a run's step in flight may finish before the run is handed over."
    )
    cron_check_s: float = _setting(1.0, "How often the leader looks for due cron schedules (one indexed query).")
    cron_missed: str = _setting(
        "latest",
        "A cron fire time that passed while every process was down (over a minute late): `latest` fires once "
        "for the latest missed time; `skip` fires none (recorded as skipped) and waits for the next time.",
    )
    job_concurrency: int = _setting(2, "Background jobs each app process's job worker runs at once (0: none).")
    job_poll_s: float = _setting(
        0.5, "How often a job worker with a free slot looks for queued jobs (at once for one made here)."
    )
    job_max_losses: int = _setting(
        3, "A resumable job whose process died more often than this is failed with the reason, not queued again."
    )
    url: str = _setting(
        "http://127.0.0.1:8080",
        "The API the CLI's `runs`, `approvals` and `jobs` commands talk to (`--url` overrides it); the run "
        "links they print are this plus /console/runs/<id>.",
    )
    token: str | None = _setting(
        None,
        "The bearer token the CLI's `runs`, `approvals` and `jobs` commands send (`--token` overrides it; "
        "`ticketiq tokens create` makes one).",
        secret=True,
    )

    crash_resume_entries: bool = _setting(
        True,
        "Whether runs of the entry points (cron, ticket events, webhooks, co-pilot and Teams turns) that may "
        "not wait are resumed after their process died (I13). false: such a run is failed with a reason "
        "naming this setting; runs that may wait are always resumed.",
    )
    answer_ttl_s: float = _setting(
        86400.0, "How long a run's final answer is kept, sealed, for its hand-on (I12); then the leader purges it."
    )
    copilot_wait_s: float = _setting(
        20.0, "How long POST /v1/copilot/turns waits for the answer before it answers 202 with the run id."
    )
    jira_webhook_secret: str | None = _setting(
        None,
        "The secret of the Jira Cloud webhook that posts to POST /v1/ticket-events (it signs each event as "
        "X-Hub-Signature: sha256=<HMAC of the body>). Unset: every ticket event is refused.",
        secret=True,
    )
    a2a_public_url: str | None = _setting(
        None,
        "This service's public base URL as A2A clients reach it (the edge's); the agent card names its JSON-RPC "
        "endpoint as this plus /a2a. Unset: the base URL of the request that fetched the card.",
    )
    a2a_default_agent: str | None = _setting(
        None,
        "The agent an A2A message is for when its metadata names none (`agent`). Unset: the first agent of "
        "the agents file; an agent the file does not define is refused at start.",
    )
    idempotency_ttl_s: float = _setting(
        86400.0,
        "How long an API Idempotency-Key is kept with its answer (at least a day: a smaller value is refused); "
        "then the leader purges it.",
    )

    retention_runs: Duration = _setting(
        Duration(30 * 86400),
        "How long an ended run is kept after it finished (finished_at), with every row that belongs to it in every "
        "table; a held run is kept whatever this says. 90s, 15m, 12h or 30d; 0 keeps for ever.",
    )
    retention_audit: Duration = _setting(
        Duration(400 * 86400),
        "How long an audit row is kept, on its own clock (an audit row of a purged run outlives it, no longer "
        "linked to it). 0 keeps for ever.",
    )
    retention_jobs: Duration = _setting(
        Duration(30 * 86400),
        "How long an ended job is kept after it finished, with its steps and answers. 0 keeps for ever.",
    )
    retention_every: Duration = _setting(
        Duration(600), "How often the leader runs the retention pass (`ticketiq retention run` runs one now)."
    )
    retention_batch: int = _setting(
        1000, "Rows one statement of the retention pass deletes at most; each batch is its own short transaction."
    )
    retention_export_dir: Path | None = _setting(
        None,
        "A folder the retention pass writes each batch of runs to (JSON Lines, gzip), fsynced before the rows are "
        "deleted. Unset: runs are purged without an export.",
    )

    fault_point: str | None = _setting(
        None,
        "TESTS ONLY, off by default: the process SIGKILLs itself at this point (after_checkpoint, "
        "after_mark, after_send, before_answer, before_hand_on, before_write).",
    )
    fault_after: int = _setting(1, "TESTS ONLY: the fault fires at the Nth time its point is reached.")

    log_level: str = _setting("INFO", "Log level of app processes.")
    log_format: str = _setting(
        "text",
        "How every process writes its log lines to stderr: `text`, a line a record for a person; `json`, one JSON "
        "object a line for a log pipeline (time, level, logger, message, process; run_id and attempt inside a run; "
        "trace_id and span_id inside an OpenTelemetry span; exception).",
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # a Duration given as a plain number (Settings(retention_runs=3.0)) is one all the same
            if f.type == "Duration" and not isinstance(getattr(self, f.name), Duration):
                object.__setattr__(self, f.name, Duration(getattr(self, f.name)))
        if self.cron_missed not in CRON_MISSED:
            raise ConfigError(f"TICKETIQ_CRON_MISSED={self.cron_missed!r} is not one of {', '.join(CRON_MISSED)}")
        if self.log_format not in LOG_FORMATS:
            raise ConfigError(f"TICKETIQ_LOG_FORMAT={self.log_format!r} is not one of {', '.join(LOG_FORMATS)}")
        if self.model_connections < 1:
            raise ConfigError(
                f"TICKETIQ_MODEL_CONNECTIONS={self.model_connections} leaves no connection to the model; set 1 or more."
            )
        if self.vendor_connections < 1:
            raise ConfigError(
                f"TICKETIQ_VENDOR_CONNECTIONS={self.vendor_connections} leaves no connection to a vendor; "
                "set 1 or more."
            )
        for name, value in (("MAX_STREAMS_PER_PRINCIPAL", self.max_streams_per_principal),
                            ("MAX_STREAMS", self.max_streams)):  # fmt: skip
            if value < 1:
                raise ConfigError(f"TICKETIQ_{name}={value} leaves no event stream to anyone; set 1 or more.")
        if self.stream_max_s <= 0:
            raise ConfigError(f"TICKETIQ_STREAM_MAX_S={self.stream_max_s:g} ends every event stream at once; set a "
                              "number of seconds above 0 (default 300).")  # fmt: skip
        if self.idempotency_ttl_s < IDEMPOTENCY_TTL_FLOOR_S:
            # Issue 7: a client may retry a lost answer for a day; a key purged sooner could make it twice.
            raise ConfigError(
                f"TICKETIQ_IDEMPOTENCY_TTL_S={self.idempotency_ttl_s:g} is below the floor of "
                f"{IDEMPOTENCY_TTL_FLOOR_S:g} s (a day); raise it or unset it."
            )

        if self.retention_batch < 1:
            raise ConfigError(f"TICKETIQ_RETENTION_BATCH={self.retention_batch} deletes nothing; set 1 or more.")
        if self.retention_every <= 0:
            raise ConfigError(
                "TICKETIQ_RETENTION_EVERY=0 would run the pass without pause; set a duration such as 10m."
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read every field from `TICKETIQ_<FIELD>`; a malformed value is a ConfigError naming it."""
        source = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            name = "TICKETIQ_" + f.name.upper()
            raw = source.get(name)
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(name, raw, _parser(f.type))
        values.update(overrides)
        return cls(**values)

    def describe(self) -> list[tuple[str, str, str]]:
        """(name, default, doc) for every setting: the table in docs/reference.md and `ticketiq settings` print it."""
        rows = []
        for f in fields(self):
            default = f.default
            shown = "(unset)" if default is None else str(default)
            if f.name == "agents":
                shown = "the shipped sample"
            rows.append(("TICKETIQ_" + f.name.upper(), shown, f.metadata["doc"]))
        return rows

    def secrets(self) -> list[str]:
        """Values that must never reach a log or a transcript."""
        return list(self._secret_values)

    @functools.cached_property
    def _secret_values(self) -> tuple[str, ...]:
        # Computed once per settings object (they are frozen), stored beside the fields: this is asked
        # for every call a run makes, and hashing the whole settings object to find it cost more.
        values = [getattr(self, f.name) for f in fields(self) if f.metadata.get("secret")]
        # The URL is no secret; its password is. Not a short one (`postgres` on a developer's server): it
        # would be scrubbed from every transcript wherever the word stands; ours are 43 characters.
        password = _password_in(self.database_url)
        values.append(password if password is not None and len(password) >= _SCRUBBED_PASSWORD_MIN else None)
        values += seal_secrets(self.seal_keys or "")
        return tuple(v for v in values if isinstance(v, str) and v not in ("", "unset"))


def seal_secrets(spec: str) -> list[str]:
    """Each seal key's secret in `id:secret,...` on its own, to be scrubbed as the whole spec is; a short one
    left, as a short password is: it would mask the word wherever it stands."""
    return [secret for part in spec.split(",") if len(secret := part.partition(":")[2].strip()) >= _SCRUBBED_SEAL_MIN]


def _password_in(url: str | None) -> str | None:
    """The password a database URL (or conninfo string) carries, as libpq reads it."""
    if not url:
        return None
    try:
        found = conninfo_to_dict(url).get("password")
    except psycopg.Error:
        return None
    return str(found) if found else None


def _parser(type_name: Any) -> Callable[[str], Any]:
    text = str(type_name)
    if text.startswith("int"):
        return int
    if text.startswith("float"):
        return float
    if text.startswith("Duration"):
        return Duration.parse
    if text.startswith("bool"):
        return _bool
    if text.startswith("Path"):
        return Path
    return str


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def _parse(name: str, raw: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not valid: {exc}. Fix or unset it.") from exc
