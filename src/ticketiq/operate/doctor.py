"""`ticketiq doctor`: what is configured, checked the way the app would use it, one line each.

Each check is one harmless read (no run, no write to a vendor): the database (reached, migrations), the
seal keys (present, and verifying the cluster's key probe), the model endpoint (its model list) and each
agent's model name in it, and each vendor's credentials (Jira: who am I; incident.io: its severities;
Teams: a token bought for the Bot Connector and one for Graph, when the bot is configured), and each MCP
server of the agents file (opened as a process opens it, tools/mcp_tools.py: its listing read, then
closed; a stdio server is a child of the doctor only while it runs) with each tool the agents name on it
that it does not list. Discord, SQS and the webhook are not checked yet.
The requests go out through the app's own transport (tools/vendor_pool.py), so HTTPS_PROXY, NO_PROXY and
SSL_CERT_FILE apply to the doctor as they do to the app.

CHECKS is the list `run` goes through. A check returns its findings; it does not print, and a failure to
reach something is a finding, not an exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ticketiq.agents import catalog as agents
from ticketiq.dbserver import authentication
from ticketiq.dbserver.target import resolve
from ticketiq.engine import seal
from ticketiq.errors import TicketIQError
from ticketiq.runtime.user_agent import user_agent
from ticketiq.settings import Settings
from ticketiq.storage import migrate
from ticketiq.storage.database import Database
from ticketiq.storage.seal_store import SealProbeStore
from ticketiq.tools import app_tokens, teams
from ticketiq.tools.base import Registry
from ticketiq.tools.http import VendorFailed
from ticketiq.tools.jira import auth_headers as jira_auth
from ticketiq.tools.mcp_tools import McpServers
from ticketiq.tools.vendor_pool import VendorTransport


@dataclass(frozen=True)
class Finding:
    subject: str  # what was checked: "database", "jira", "agent triage", ...
    problem: str | None  # None: fine
    detail: str = ""  # what was seen when fine

    def line(self) -> str:
        if self.problem is None:
            return f"ok    {self.subject}: {self.detail or 'fine'}"
        return f"WRONG {self.subject}: {self.problem}"


@dataclass
class Context:
    settings: Settings
    http: httpx.AsyncClient
    database_url: str | None = None  # once the database check reached it


Check = Callable[[Context], Awaitable[list[Finding]]]


async def check_database(ctx: Context) -> list[Finding]:
    settings = ctx.settings
    if not settings.database_url and not (Path(settings.home) / "pg.password").exists():
        problem = "TICKETIQ_DATABASE_URL is unset and TICKETIQ_HOME has no embedded server: set your Postgres's URL"
        return [Finding("database", problem)]
    try:
        target = await asyncio.to_thread(resolve, settings)
    except TicketIQError as exc:
        return [Finding("database", str(exc))]
    try:
        async with await psycopg.AsyncConnection.connect(
            target.url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=max(1, int(settings.db_connect_timeout_s)),
        ) as conn:
            pending, _others = await migrate.check(conn)
    except Exception as exc:  # psycopg's errors name the host and the reason, never the password
        where = authentication.without_password(target.url)
        return [Finding("database", f"cannot reach {where}: {_first_line(exc)}")]
    finally:
        target.release()
    ctx.database_url = target.url
    note = f"{len(pending)} migration(s) pending; the first process applies them" if pending else "migrated"
    return [Finding("database", None, note)]


async def check_seal_keys(ctx: Context) -> list[Finding]:
    settings = ctx.settings
    if not settings.seal_keys and not (Path(settings.home) / "seal.key").exists():
        problem = (
            "TICKETIQ_SEAL_KEYS is unset and TICKETIQ_HOME has no seal.key: set the same TICKETIQ_SEAL_KEYS "
            "on every host"
        )
        return [Finding("seal keys", problem)]
    try:
        keys = seal.load_keys(settings)
    except TicketIQError as exc:
        return [Finding("seal keys", str(exc))]
    if ctx.database_url is None:
        return [Finding("seal keys", None, f"signing with {keys.signing_id}; the cluster's probe unread (no database)")]
    db = Database(ctx.database_url, min_size=1, max_size=1)
    try:
        await db.open()
        found = await SealProbeStore(db).find()
    except Exception as exc:
        return [Finding("seal keys", f"cannot read the cluster's key probe: {_first_line(exc)}")]
    finally:
        await db.close()
    if found is None:
        return [Finding("seal keys", None, f"signing with {keys.signing_id}; no process has written the probe yet")]
    try:
        seal.check_probe(keys, *found)
    except TicketIQError as exc:
        return [Finding("seal keys", str(exc))]
    return [Finding("seal keys", None, f"signing with {keys.signing_id}; they verify the cluster's probe")]


async def check_model(ctx: Context) -> list[Finding]:
    settings = ctx.settings
    url = f"{settings.model_base_url.rstrip('/')}/models"
    headers = {"Authorization": f"Bearer {settings.model_api_key}"}
    reply, problem = await _get(ctx, url, headers, "TICKETIQ_MODEL_API_KEY")
    if problem is not None:
        return [Finding("model endpoint", problem)]
    assert reply is not None
    served = {m.get("id") for m in reply.get("data", []) if isinstance(m, dict)}
    findings = [Finding("model endpoint", None, f"{settings.model_base_url} serves {len(served)} model(s)")]
    try:
        catalog = agents.load(settings.agents)
    except TicketIQError as exc:
        return [*findings, Finding("agents", f"{settings.agents}: {exc}")]
    for name, agent in sorted(catalog.agents.items()):
        model = agent.model or settings.model
        findings.append(Finding(f"agent {name}", *model_problem(model, served, settings.model_base_url)))
    return findings


def model_problem(model: str, served: set[Any], base_url: str) -> tuple[str | None, str]:
    """An agent's model against the endpoint's list. An empty list (Azure OpenAI lists none per deployment)
    proves nothing either way."""
    if not served or model in served:
        return None, f"model {model}"
    return f"model {model!r} is not among the models {base_url} serves", ""


async def check_jira(ctx: Context) -> list[Finding]:
    settings = ctx.settings
    url = f"{settings.jira_url.rstrip('/')}/rest/api/3/myself"
    names = "TICKETIQ_JIRA_TOKEN and TICKETIQ_JIRA_EMAIL" if settings.jira_email else "TICKETIQ_JIRA_TOKEN"
    reply, problem = await _get(ctx, url, jira_auth(settings), names)
    if problem is not None:
        return [Finding("jira", problem)]
    assert reply is not None
    who = reply.get("emailAddress") or reply.get("displayName") or reply.get("accountId")
    scheme = "Basic (Cloud)" if settings.jira_email else "Bearer (Data Center)"
    return [Finding("jira", None, f"{scheme} as {who}")]


async def check_incidentio(ctx: Context) -> list[Finding]:
    settings = ctx.settings
    url = f"{settings.incidentio_url.rstrip('/')}/v1/severities"
    headers = {"Authorization": f"Bearer {settings.incidentio_api_key}"}
    _reply, problem = await _get(ctx, url, headers, "TICKETIQ_INCIDENTIO_API_KEY")
    return [Finding("incident.io", problem, "" if problem else "severities read")]


async def check_teams(ctx: Context) -> list[Finding]:
    """The bot's credentials buy a token for each scope it uses: the Bot Connector's and Graph's."""
    settings = ctx.settings
    if not settings.teams_app_id:
        return [Finding("teams", None, "not configured (TICKETIQ_TEAMS_APP_ID unset: the Teams inbox is off)")]
    findings = []
    for name, grant in (("teams bot connector", teams.connector_grant), ("teams graph", teams.graph_grant)):
        try:
            await app_tokens.AppTokens().token(grant(settings), ctx.http, settings.http_timeout_s, 0)
        except VendorFailed as exc:  # it names the setting to fix and quotes the endpoint, never the secret
            findings.append(Finding(name, str(exc)))
            continue
        findings.append(Finding(name, None, "a token was granted"))
    return findings


async def check_mcp_servers(ctx: Context) -> list[Finding]:
    """Each MCP server reached and listed the way a process does it at start, then each tool an agent or a
    workflow names on it and it does not list (a process refuses to start on one)."""
    settings = ctx.settings
    try:
        catalog = agents.load(settings.agents)
    except TicketIQError:
        return []  # check_model named the agents file's problem
    if not catalog.mcp_servers:
        return []
    servers = McpServers(catalog.mcp_servers)
    try:
        await servers.start(settings.mcp_start_wait_s)
        servers.register(Registry(), catalog.named_tools())  # a registry of its own: only for `unlisted`
        findings = []
        for view, spec in zip(servers.views(), catalog.mcp_servers, strict=True):
            problem, detail = server_problem(view, settings.mcp_start_wait_s, spec.secrets())
            findings.append(Finding(f"mcp {spec.name}", problem, detail))
            findings.extend(Finding(f"mcp {spec.name}", line) for line in servers.unlisted(spec.name))
    finally:
        await servers.stop()  # a stdio server's child ends here
    return findings


def server_problem(view: dict[str, Any], wait_s: float, secrets: list[str]) -> tuple[str | None, str]:
    """One server's view (McpLink.view) as a finding's problem or detail. The error is the SDK's or the
    transport's; a value of the server's headers or environment is masked should it echo one."""
    where, state = view["where"], view["state"]
    if state == "ready":
        return None, f"ready at {where}, {len(view['tools'])} tool(s)"
    if state == "unreachable":
        error = str(view.get("error") or "")
        for secret in secrets:
            error = error.replace(secret, "***")
        return f"unreachable at {where}: {error}", ""
    return f"no answer from {where} in {wait_s:g} s (TICKETIQ_MCP_START_WAIT_S)", ""


# In order: the seal keys read the database the database check reached.
CHECKS: list[Check] = [
    check_database, check_seal_keys, check_model, check_jira, check_incidentio, check_teams, check_mcp_servers,
]  # fmt: skip


async def _get(
    ctx: Context, url: str, headers: dict[str, str], secret: str
) -> tuple[dict[str, Any] | None, str | None]:
    """GET a JSON object; or the problem in one line, naming the setting to fix when it is the credential."""
    try:
        response = await ctx.http.get(url, headers=headers)
    except httpx.HTTPError as exc:
        return None, f"cannot reach {url}: {type(exc).__name__} {_first_line(exc)}".rstrip()
    if response.status_code in (401, 403):
        return None, f"{url} refused the credentials ({response.status_code}): check {secret}"
    if response.status_code != 200:
        return None, f"{url} answered {response.status_code}: {_first_line(response.text)[:200]}"
    try:
        body = response.json()
    except ValueError:
        return None, f"{url} answered something other than JSON: is the URL right?"
    return (body, None) if isinstance(body, dict) else (None, f"{url} answered JSON that is not an object")


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


async def diagnose(settings: Settings, checks: list[Check] | None = None) -> list[Finding]:
    transport = VendorTransport(4)
    async with httpx.AsyncClient(
        transport=transport, timeout=settings.http_timeout_s, headers={"User-Agent": user_agent()}
    ) as http:
        ctx = Context(settings, http)
        findings: list[Finding] = []
        for check in CHECKS if checks is None else checks:
            findings.extend(await check(ctx))
    return findings


def run(settings: Settings) -> int:
    """Print one line a finding; 0 when nothing is wrong, 1 otherwise."""
    findings = asyncio.run(diagnose(settings))
    for finding in findings:
        print(finding.line(), flush=True)
    wrong = sum(f.problem is not None for f in findings)
    print(f"{wrong} problem(s)" if wrong else "all is well")
    return 1 if wrong else 0
