"""Jira Cloud v3: read an issue and its transitions, comment, transition.

Jira has no idempotency key anywhere. A comment carries the step key as the comment property
`ticketiq.step_key`, set at create, which `comment/list?expand=properties` reads back (the plain
comment listing does not return properties). A transition is read back from the issue's status.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import quote

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.http import Send, request

VENDOR = "jira"
STEP_KEY_PROPERTY = "ticketiq.step_key"
_PAGE = 100

_ISSUE_KEY = {
    "type": "string",
    "pattern": "^[A-Z][A-Z0-9_]+-[0-9]+$",
    "maxLength": 255,
    "description": "Jira issue key, e.g. OPS-123",
}


def tools(settings: Settings) -> list[Tool]:
    return [
        Tool(
            "jira_get_issue",
            "Read a Jira issue: summary, description, status.",
            _params(issue_key=_ISSUE_KEY),
            ToolClass.READ,
            get_issue,
            vendor=VENDOR,
        ),
        Tool(
            "jira_list_transitions",
            "List the transitions a Jira issue can take from its status now.",
            _params(issue_key=_ISSUE_KEY),
            ToolClass.READ,
            list_transitions,
            vendor=VENDOR,
        ),
        Tool(
            "jira_add_comment",
            "Add a comment to a Jira issue.",
            _params(issue_key=_ISSUE_KEY, body={"type": "string", "minLength": 1, "maxLength": 32000}),
            ToolClass.WRITE,
            add_comment,
            reader=find_comment,
            vendor=VENDOR,
        ),
        Tool(
            "jira_transition",
            "Move a Jira issue through a transition, named as Jira names it "
            "(or by the status it leads to), e.g. 'In Progress' or 'Done'.",
            _params(issue_key=_ISSUE_KEY, transition={"type": "string", "minLength": 1, "maxLength": 255}),
            ToolClass.WRITE,
            transition,
            reader=read_status,
            vendor=VENDOR,
        ),
    ]


async def get_issue(ctx: CallContext) -> Outcome:
    reply = await request(ctx, VENDOR, "GET", _issue_url(ctx), send=Send.READ, headers=_auth(ctx))
    return Outcome(ok=True, result=reply.body)


async def list_transitions(ctx: CallContext) -> Outcome:
    offered = await _transitions(ctx)
    return Outcome(ok=True, result=[{"id": t["id"], "name": t["name"], "to": t["to"]["name"]} for t in offered])


async def add_comment(ctx: CallContext) -> Outcome:
    body = {"body": _adf(ctx.args["body"]), "properties": [{"key": STEP_KEY_PROPERTY, "value": ctx.key}]}
    url = f"{_issue_url(ctx)}/comment"
    reply = await request(ctx, VENDOR, "POST", url, send=Send.UNKEYED, headers=_auth(ctx), json=body)
    return Outcome(ok=True, result={"issue_key": ctx.args["issue_key"], "comment_id": reply.body["id"]})


async def find_comment(ctx: CallContext) -> ReadBack:
    """Page through the issue's comments, newest first, reading each page's properties."""
    start = 0
    while True:
        page = await request(
            ctx,
            VENDOR,
            "GET",
            f"{_issue_url(ctx)}/comment",
            send=Send.READ,
            headers=_auth(ctx),
            params={"startAt": start, "maxResults": _PAGE, "orderBy": "-created"},
        )
        comments = page.body["comments"]
        if not comments:
            return ReadBack(found=False)
        listed = await request(
            ctx,
            VENDOR,
            "POST",
            f"{_base(ctx)}/comment/list",
            send=Send.READ,
            headers=_auth(ctx),
            params={"expand": "properties"},
            json={"ids": [int(c["id"]) for c in comments]},
        )
        for comment in listed.body["values"]:
            if any(p.get("key") == STEP_KEY_PROPERTY and p.get("value") == ctx.key for p in comment["properties"]):
                result = {"issue_key": ctx.args["issue_key"], "comment_id": comment["id"]}
                return ReadBack(found=True, outcome=Outcome(ok=True, result=result))
        start += len(comments)
        if start >= page.body["total"]:
            return ReadBack(found=False)


async def transition(ctx: CallContext) -> Outcome:
    offered = await _transitions(ctx)
    chosen = _named(offered, ctx.args["transition"])
    if chosen is None:
        names = ", ".join(f"{t['name']} (to {t['to']['name']})" for t in offered) or "none"
        error = f"jira: no transition {ctx.args['transition']!r} from the issue's status now; offered: {names}"
        return Outcome(ok=False, error=error)
    url = f"{_issue_url(ctx)}/transitions"
    body = {"transition": {"id": chosen["id"]}}
    await request(ctx, VENDOR, "POST", url, send=Send.UNKEYED, headers=_auth(ctx), json=body)
    return Outcome(ok=True, result=_moved(ctx, chosen["to"]["name"]))


async def read_status(ctx: CallContext) -> ReadBack:
    """Landed when the issue is in the transition's target. The target is known while the transition
    is still offered (then it has not landed); once it is not, the status must carry its name."""
    issue = await request(
        ctx, VENDOR, "GET", _issue_url(ctx), send=Send.READ, headers=_auth(ctx), params={"fields": "status"}
    )
    status = issue.body["fields"]["status"]["name"]
    chosen = _named(await _transitions(ctx), ctx.args["transition"])
    if chosen is not None:
        target = chosen["to"]["name"]
        return ReadBack(found=status == target, outcome=Outcome(ok=True, result=_moved(ctx, status)))
    if status.casefold() == ctx.args["transition"].casefold():
        return ReadBack(found=True, outcome=Outcome(ok=True, result=_moved(ctx, status)))
    return ReadBack(found=None)


async def _transitions(ctx: CallContext) -> list[dict[str, Any]]:
    url = f"{_issue_url(ctx)}/transitions"
    reply = await request(ctx, VENDOR, "GET", url, send=Send.READ, headers=_auth(ctx))
    offered: list[dict[str, Any]] = reply.body["transitions"]
    return offered


def _named(offered: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    wanted = name.casefold()
    for candidate in offered:
        if wanted in (candidate["name"].casefold(), candidate["to"]["name"].casefold()):
            return candidate
    return None


def _moved(ctx: CallContext, status: str) -> dict[str, Any]:
    return {"issue_key": ctx.args["issue_key"], "status": status}


def _params(**properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _base(ctx: CallContext) -> str:
    return f"{ctx.settings.jira_url.rstrip('/')}/rest/api/3"


def _issue_url(ctx: CallContext) -> str:
    return f"{_base(ctx)}/issue/{quote(ctx.args['issue_key'], safe='')}"


def _auth(ctx: CallContext) -> dict[str, str]:
    return auth_headers(ctx.settings)


def auth_headers(settings: Settings) -> dict[str, str]:
    return {"Authorization": authorization(settings.jira_email, settings.jira_token), "Accept": "application/json"}


def authorization(email: str | None, token: str) -> str:
    """Jira Cloud takes an API token only as Basic auth with its account's email; Jira Data Center takes a
    personal access token as Bearer."""
    if email:
        return "Basic " + base64.b64encode(f"{email}:{token}".encode()).decode("ascii")
    return f"Bearer {token}"


def _adf(text: str) -> dict[str, Any]:
    """Atlassian Document Format: one paragraph per line of the text."""
    paragraphs = [
        {"type": "paragraph", "content": [{"type": "text", "text": line}]} if line else {"type": "paragraph"}
        for line in text.split("\n")
    ]
    return {"type": "doc", "version": 1, "content": paragraphs}
