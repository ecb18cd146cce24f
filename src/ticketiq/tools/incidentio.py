"""incident.io v2: create (deduped on our key), edit (set semantics), list.

Create sends the step key as `idempotency_key`. incident.io does not document how long it keeps a key;
it is treated as longer than a resume can take (`dedupe_window_s` infinite), so the engine resends an
in-doubt create with the same key (I9). What a repeated key answers is undocumented too: the original
incident, or an error; on a 409 the create looks for the original by its marker and answers with it.
The marker is the summary's last line, `[ticketiq-step-key: <key>]`: the incident list returns
summaries, so the reader can find the incident again without any custom field configured.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.http import Send, VendorFailed, request

VENDOR = "incidentio"
_LIST_PAGE = 100
_LIST_PAGES_MAX = 50  # past 5,000 incidents the reader says it cannot tell rather than go on

_TEXT = {"type": "string", "minLength": 1, "maxLength": 10000}
_NAME = {"type": "string", "minLength": 1, "maxLength": 255}
_SEVERITY = {"type": "string", "minLength": 1, "description": "severity name, e.g. minor, major, critical"}


def marker(key: str) -> str:
    return f"[ticketiq-step-key: {key}]"


def tools(settings: Settings) -> list[Tool]:
    create_params = {
        "type": "object",
        "properties": {"name": _NAME, "summary": _TEXT, "severity": _SEVERITY},
        "required": ["name", "summary", "severity"],
        "additionalProperties": False,
    }
    edit_params = {
        "type": "object",
        "properties": {
            "incident_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "summary": _TEXT,
            "severity": _SEVERITY,
            "status": {"type": "string", "minLength": 1, "description": "status name, e.g. Fixing, Closed"},
        },
        "required": ["incident_id"],
        "additionalProperties": False,
    }
    list_params = {
        "type": "object",
        "properties": {"limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        "additionalProperties": False,
    }
    return [
        Tool(
            "incidentio_create_incident",
            "Open an incident in incident.io.",
            create_params,
            ToolClass.KEYED_WRITE,
            create_incident,
            reader=find_incident,
            dedupe_window_s=float("inf"),
            vendor=VENDOR,
        ),
        Tool(
            "incidentio_edit_incident",
            "Change an incident's summary, severity or status; fields not given stay as they are.",
            edit_params,
            ToolClass.WRITE,
            edit_incident,
            reader=read_incident,
            vendor=VENDOR,
        ),
        Tool(
            "incidentio_list_incidents",
            "List recent incidents, newest first.",
            list_params,
            ToolClass.READ,
            list_incidents,
            vendor=VENDOR,
        ),
    ]


async def create_incident(ctx: CallContext) -> Outcome:
    severity = await _catalogue_id(ctx, "/v1/severities", "severities", ctx.args["severity"], "severity")
    body = {
        "idempotency_key": ctx.key,
        "visibility": "public",
        "mode": "standard",
        "name": ctx.args["name"],
        "summary": f"{ctx.args['summary']}\n\n{marker(ctx.key)}",
        "severity_id": severity,
    }
    try:
        reply = await request(
            ctx, VENDOR, "POST", f"{_base(ctx)}/v2/incidents", send=Send.KEYED, headers=_auth(ctx), json=body
        )
    except VendorFailed as failed:
        if failed.status != 409:
            raise
        # The key was used before: the incident exists; answer with it, as a repeat would.
        found = await find_incident(ctx)
        if found.found and found.outcome is not None:
            return found.outcome
        raise
    return Outcome(ok=True, result=reply.body)


async def find_incident(ctx: CallContext) -> ReadBack:
    """List incidents, newest first, and match the key's marker in the summary."""
    wanted = marker(ctx.key)
    after: str | None = None
    for _ in range(_LIST_PAGES_MAX):
        params: dict[str, Any] = {"page_size": _LIST_PAGE}
        if after:
            params["after"] = after
        reply = await request(
            ctx,
            VENDOR,
            "GET",
            f"{_base(ctx)}/v2/incidents",
            send=Send.READ,
            headers=_auth(ctx),
            params=params,
        )
        for incident in reply.body["incidents"]:
            if wanted in (incident.get("summary") or ""):
                return ReadBack(found=True, outcome=Outcome(ok=True, result={"incident": incident}))
        after = (reply.body.get("pagination_meta") or {}).get("after")
        if not after:
            return ReadBack(found=False)
    return ReadBack(found=None)


async def edit_incident(ctx: CallContext) -> Outcome:
    fields: dict[str, Any] = {}
    if "summary" in ctx.args:
        fields["summary"] = ctx.args["summary"]
    if "severity" in ctx.args:
        fields["severity_id"] = await _catalogue_id(
            ctx, "/v1/severities", "severities", ctx.args["severity"], "severity"
        )
    if "status" in ctx.args:
        fields["incident_status_id"] = await _catalogue_id(
            ctx, "/v1/incident_statuses", "incident_statuses", ctx.args["status"], "status"
        )
    body = {"incident": fields, "notify_incident_channel": False}
    url = f"{_incident_url(ctx)}/actions/edit"
    reply = await request(ctx, VENDOR, "POST", url, send=Send.UNKEYED, headers=_auth(ctx), json=body)
    return Outcome(ok=True, result=reply.body)


async def read_incident(ctx: CallContext) -> ReadBack:
    """The edit landed when every field it gives reads back as given (set semantics: a resend converges)."""
    reply = await request(ctx, VENDOR, "GET", _incident_url(ctx), send=Send.READ, headers=_auth(ctx))
    incident = reply.body["incident"]
    severity = (incident.get("severity") or {}).get("name", "")
    status = (incident.get("incident_status") or {}).get("name", "")
    landed = (
        ("summary" not in ctx.args or incident.get("summary") == ctx.args["summary"])
        and ("severity" not in ctx.args or severity.casefold() == ctx.args["severity"].casefold())
        and ("status" not in ctx.args or status.casefold() == ctx.args["status"].casefold())
    )
    return ReadBack(found=landed, outcome=Outcome(ok=True, result=reply.body) if landed else None)


async def list_incidents(ctx: CallContext) -> Outcome:
    params = {"page_size": ctx.args.get("limit", 25)}
    reply = await request(
        ctx, VENDOR, "GET", f"{_base(ctx)}/v2/incidents", send=Send.READ, headers=_auth(ctx), params=params
    )
    shown = [
        {
            "id": i["id"],
            "reference": i.get("reference"),
            "name": i.get("name"),
            "status": (i.get("incident_status") or {}).get("name"),
            "severity": (i.get("severity") or {}).get("name"),
            "created_at": i.get("created_at"),
        }
        for i in reply.body["incidents"]
    ]
    return Outcome(ok=True, result={"incidents": shown})


async def _catalogue_id(ctx: CallContext, path: str, field: str, name: str, what: str) -> str:
    """The id of a severity or status by its name (ids differ per account): one read first."""
    reply = await request(ctx, VENDOR, "GET", f"{_base(ctx)}{path}", send=Send.READ, headers=_auth(ctx))
    entries: list[dict[str, Any]] = reply.body[field]
    for entry in entries:
        if name.casefold() in (str(entry["name"]).casefold(), str(entry["id"]).casefold()):
            return str(entry["id"])
    known = ", ".join(str(e["name"]) for e in entries)
    raise VendorFailed(Outcome(ok=False, error=f"incidentio: no {what} named {name!r}; known: {known}"))


def _base(ctx: CallContext) -> str:
    return ctx.settings.incidentio_url.rstrip("/")


def _incident_url(ctx: CallContext) -> str:
    return f"{_base(ctx)}/v2/incidents/{quote(ctx.args['incident_id'], safe='')}"


def _auth(ctx: CallContext) -> dict[str, str]:
    return {"Authorization": f"Bearer {ctx.settings.incidentio_api_key}", "Accept": "application/json"}
