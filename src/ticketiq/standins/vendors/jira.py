"""Jira Cloud v3 stand-in: issues, comments with properties, and a simplified workflow.

Any well-formed key (`OPS-123`) exists on first sight, in `To Do`, with a summary and description
derived from the key, so the same key always reads the same. Issues of the project `BIN` hold
text Postgres cannot store in their description (a NUL and a lone surrogate), as pasted logs do.
The workflow is Jira's simplified one: global transitions `11` To Do, `21` In Progress, `31` Done,
each offered from every status but its own target, so a replay after the status moved is refused
400 as Jira refuses it.

A project can be filled in bulk (`POST /_standin/jira/projects/{key}/generate {"count": N}`: issues
KEY-1..KEY-N with text and a topic label, `jira_corpus.py`) and read back page by page through the
enhanced JQL search (`/rest/api/3/search/jql`, `jira_search.py`); the old `/rest/api/3/search`
(startAt/total) answers 410 Gone, as Jira Cloud has since it removed it.

Credentials, once the stand-in knows accounts (options `jira_api_tokens`, `jira_personal_tokens`), are
checked on every route as Jira checks them: Basic `email:api-token` (Cloud) or Bearer with a personal
access token (Data Center); anything else is 401, and `GET /rest/api/3/myself` names the account.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.standins.records import Answer, Effect, Row, Session, Write, iso, jsonb
from ticketiq.standins.vendors.intake import Intake, IntakeDep, StandinOptions, has_auth, json_body
from ticketiq.standins.vendors.jira_corpus import generated_issue
from ticketiq.standins.vendors.jira_search import Jql, PageToken, SearchRefused, chosen_fields, page_size, parse_jql

VENDOR = "jira"

STATUSES = {
    "To Do": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}},
    "In Progress": {
        "id": "3",
        "name": "In Progress",
        "statusCategory": {"key": "indeterminate", "name": "In Progress"},
    },
    "Done": {"id": "10001", "name": "Done", "statusCategory": {"key": "done", "name": "Done"}},
}
TRANSITIONS = {"11": "To Do", "21": "In Progress", "31": "Done"}

_KEY = re.compile(r"^[A-Z][A-Z0-9_]+-[1-9][0-9]*$")
_SUBJECTS = [
    "Checkout page times out",
    "Password reset mail never arrives",
    "Invoice PDF is blank",
    "Search returns stale results",
    "Mobile app crashes on login",
    "Webhook retries pile up",
]
_MISSING = "Issue does not exist or you do not have permission to see it."
_PROJECT = re.compile(r"^[A-Z][A-Z0-9_]+$")
_REMOVED = (
    "The requested API has been removed. Please migrate to the /rest/api/3/search/jql API. A full migration "
    "guideline is available at https://developer.atlassian.com/changelog/#CHANGE-2046"
)


_UNAUTHENTICATED = "Client must be authenticated to access this resource."


def account(authorization: str, options: StandinOptions) -> str | None:
    """Whose credentials the Authorization header carries: an email (Cloud), "pat" (Data Center), "anyone"
    while the stand-in knows no accounts, or None when Jira would refuse them."""
    if options.jira_api_tokens is None and options.jira_personal_tokens is None:
        return "anyone" if authorization.strip() else None
    scheme, _, credential = authorization.strip().partition(" ")
    if scheme.lower() == "bearer" and credential in (options.jira_personal_tokens or []):
        return "pat"
    if scheme.lower() == "basic":
        try:
            email, _, token = base64.b64decode(credential, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if email and (options.jira_api_tokens or {}).get(email) == token:
            return email
    return None


async def _authenticated(request: Request, intake: IntakeDep) -> None:
    if intake.options.jira_api_tokens is None and intake.options.jira_personal_tokens is None:
        return  # no accounts known: the routes check only that a credential came, where they did before
    if account(request.headers.get("authorization", ""), intake.options) is None:
        raise HTTPException(401, {"errorMessages": [_UNAUTHENTICATED], "errors": {}})


def router() -> APIRouter:
    api = APIRouter(dependencies=[Depends(_authenticated)])

    @api.get("/rest/api/3/myself")
    async def myself(request: Request, intake: IntakeDep) -> Response:
        who = account(request.headers.get("authorization", ""), intake.options)
        if who is None:
            raise HTTPException(401, {"errorMessages": [_UNAUTHENTICATED], "errors": {}})
        body = {"accountId": "standin-bot", "displayName": "TicketIQ", "active": True}
        if "@" in who:
            body["emailAddress"] = who
        return JSONResponse(body)

    @api.get("/rest/api/3/issue/{key}")
    async def get_issue(key: str, request: Request, intake: IntakeDep) -> Response:
        wanted = [f for f in request.query_params.get("fields", "").split(",") if f]

        async def answer() -> Answer:
            if not _KEY.match(key):
                return _error(404, _MISSING)
            issue = await intake.store.fetch_one("standin.jira_issue", {"key": key})
            assert issue is not None
            fields = _fields(issue)
            if wanted and "*all" not in wanted:
                fields = {k: v for k, v in fields.items() if k in wanted}
            return Answer(200, {"id": str(issue["id"]), "key": key, "self": _self(request, key), "fields": fields})

        return await intake.read(VENDOR, "get_issue", answer)

    @api.get("/rest/api/3/issue/{key}/transitions")
    async def list_transitions(key: str, intake: IntakeDep) -> Response:
        async def answer() -> Answer:
            if not _KEY.match(key):
                return _error(404, _MISSING)
            issue = await intake.store.fetch_one("standin.jira_issue", {"key": key})
            assert issue is not None
            offered = [
                {"id": tid, "name": to, "to": STATUSES[to], "hasScreen": False, "isGlobal": True}
                for tid, to in TRANSITIONS.items()
                if to != issue["status"]
            ]
            return Answer(200, {"expand": "transitions", "transitions": offered})

        return await intake.read(VENDOR, "list_transitions", answer)

    @api.post("/rest/api/3/issue/{key}/transitions")
    async def transition(key: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _error(401, "You are not authenticated.")
            if not _KEY.match(key):
                return _error(404, _MISSING)
            wanted = body.get("transition", {}) if isinstance(body, dict) else {}
            tid = str(wanted.get("id", "")) if isinstance(wanted, dict) else ""
            await session.fetch_one("standin.jira_issue", {"key": key})
            moved = None
            if tid in TRANSITIONS:
                moved = await session.fetch_one("standin.jira_transition", {"key": key, "to": TRANSITIONS[tid]})
            if moved is None:
                return _error(400, f"Transition id '{tid}' is not valid for this issue.")
            return Answer(204, None, Effect.APPLIED, key)

        return await intake.write(Write(VENDOR, "transition", key, None, body), apply)

    @api.post("/rest/api/3/issue/{key}/comment")
    async def add_comment(key: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        properties = body.get("properties") if isinstance(body, dict) else None
        carried = _carried_key(properties)
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _error(401, "You are not authenticated.")
            if not _KEY.match(key):
                return _error(404, _MISSING)
            problem = _comment_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            await session.fetch_one("standin.jira_issue", {"key": key})
            row = await session.fetch_one(
                "standin.jira_comment_insert",
                {"issue_key": key, "body": jsonb(body["body"]), "properties": jsonb(properties or [])},
            )
            assert row is not None
            return Answer(201, _comment(request, row, with_properties=False), Effect.APPLIED, str(row["id"]))

        return await intake.write(Write(VENDOR, "add_comment", key, carried, body), apply)

    @api.get("/rest/api/3/issue/{key}/comment")
    async def list_comments(key: str, request: Request, intake: IntakeDep) -> Response:
        query = request.query_params

        async def answer() -> Answer:
            if not _KEY.match(key):
                return _error(404, _MISSING)
            try:
                start = max(int(query.get("startAt", "0")), 0)
                limit = min(max(int(query.get("maxResults", "50")), 1), 100)
            except ValueError:
                return _error(400, "startAt and maxResults must be integers.")
            params = {
                "issue_key": key,
                "start": start,
                "limit": limit,
                "newest_first": query.get("orderBy", "created").startswith("-"),
            }
            total = await intake.store.fetch_one("standin.jira_comments_count", params)
            rows = await intake.store.fetch_all("standin.jira_comments_page", params)
            comments = [_comment(request, r, with_properties=False) for r in rows]
            return Answer(
                200,
                {
                    "startAt": start,
                    "maxResults": limit,
                    "total": total["total"] if total else 0,
                    "comments": comments,
                },
            )

        return await intake.read(VENDOR, "list_comments", answer)

    @api.post("/rest/api/3/comment/list")
    async def comment_list(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        expand = request.query_params.get("expand", "").split(",")

        async def answer() -> Answer:
            ids = body.get("ids") if isinstance(body, dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                return _error(400, "ids must be a list of comment ids.")
            if len(ids) > 1000:
                return _error(400, "At most 1000 ids may be requested at once.")
            rows = await intake.store.fetch_all("standin.jira_comments_by_ids", {"ids": ids})
            values = [_comment(request, r, with_properties="properties" in expand) for r in rows]
            return Answer(
                200,
                {"startAt": 0, "maxResults": 1000, "total": len(values), "isLast": True, "values": values},
            )

        return await intake.read(VENDOR, "comment_list", answer)

    @api.get("/rest/api/3/search/jql")
    async def search_get(request: Request, intake: IntakeDep) -> Response:
        query = request.query_params
        asked = {
            "jql": query.get("jql", ""),
            "maxResults": query.get("maxResults"),
            "fields": query.getlist("fields"),
            "nextPageToken": query.get("nextPageToken"),
        }
        return await intake.read(VENDOR, "search", lambda: _search(request, intake, asked))

    @api.post("/rest/api/3/search/jql")
    async def search_post(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)

        async def answer() -> Answer:
            if not isinstance(body, dict):
                return _error(400, "Request body must be a JSON object.")
            fields = body.get("fields", [])
            if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
                return _error(400, "", {"fields": "fields must be a list of field names."})
            return await _search(request, intake, body)

        return await intake.read(VENDOR, "search", answer)

    @api.api_route("/rest/api/3/search", methods=["GET", "POST"])
    async def legacy_search(intake: IntakeDep) -> Response:
        # Removed from Jira Cloud in 2025 (CHANGE-2046): startAt/total paging answers 410 Gone there.
        async def answer() -> Answer:
            return _error(410, _REMOVED)

        return await intake.read(VENDOR, "search", answer)

    @api.post("/rest/api/3/search/approximate-count")
    async def approximate_count(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)

        async def answer() -> Answer:
            try:
                jql = parse_jql(str(body.get("jql", "")) if isinstance(body, dict) else "")
            except SearchRefused as refused:
                return _error(400, str(refused))
            row = await intake.store.fetch_one("standin.jira_count", {"project": jql.project})
            return Answer(200, {"count": row["count"] if row else 0})

        return await intake.read(VENDOR, "approximate_count", answer)

    return api


class Generate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int = Field(ge=1, le=100_000)


def admin_router() -> APIRouter:
    """Test controls, under /_standin/jira: fill a project with generated issues."""
    api = APIRouter()

    @api.post("/projects/{key}/generate")
    async def generate(key: str, wanted: Generate, intake: IntakeDep) -> dict[str, Any]:
        if not _PROJECT.match(key):
            raise HTTPException(422, f"{key!r} is not a project key (A-Z, digits, _; a letter first)")
        issues = [generated_issue(key, n) for n in range(1, wanted.count + 1)]
        rows = [
            {
                "key": i.key, "status": i.status, "summary": i.summary, "description": i.description,
                "labels": list(i.labels), "created_at": i.created_at.isoformat(),
            }
            for i in issues
        ]  # fmt: skip
        made = await intake.store.fetch_one("standin.jira_generate", {"issues": jsonb(rows)})
        total = await intake.store.fetch_one("standin.jira_count", {"project": key})
        assert made is not None and total is not None
        return {"project": key, "generated": made["made"], "issues": total["count"]}

    return api


async def _search(request: Request, intake: Intake, asked: dict[str, Any]) -> Answer:
    """One page of the enhanced search, in key order; the token of the next page unless this is the last."""
    try:
        jql = parse_jql(str(asked.get("jql") or ""))
        fields = chosen_fields(asked.get("fields") or [])
        limit = page_size(asked.get("maxResults"), fields)
        token = asked.get("nextPageToken")
        after = PageToken.decode(str(token), jql).after if token else 0
    except SearchRefused as refused:
        return _error(400, str(refused))
    name = "standin.jira_search_desc" if jql.descending else "standin.jira_search_asc"
    rows = await intake.store.fetch_all(name, {"project": jql.project, "after": after, "limit": limit})
    page, more = rows[:limit], len(rows) > limit
    issues = [_found(request, row, fields) for row in page]
    body: dict[str, Any] = {"issues": issues, "isLast": not more}
    if more:
        body["nextPageToken"] = _next_token(page[-1], jql)
    return Answer(200, body)


def _next_token(row: Row, jql: Jql) -> str:
    return PageToken(int(row["number"]), jql.fingerprint()).encode()


def _found(request: Request, row: Row, fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": str(row["id"]), "key": row["key"], "self": _self(request, f"issue/{row['id']}")}
    if fields:
        every = _fields(row)
        out["fields"] = {name: every[name] for name in fields if name in every}
    return out


def _carried_key(properties: Any) -> str | None:
    """The value of the first comment property: where a caller puts what it will find the comment by."""
    if not isinstance(properties, list) or not properties or not isinstance(properties[0], dict):
        return None
    value = properties[0].get("value")
    return value if isinstance(value, str) else json.dumps(value)


def _comment_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict):
        return _error(400, "Request body must be a JSON object.")
    doc = body.get("body")
    if not isinstance(doc, dict) or doc.get("type") != "doc" or not isinstance(doc.get("content"), list):
        return _error(400, "", {"comment": "Comment body must be an Atlassian Document Format document."})
    properties = body.get("properties", [])
    if not isinstance(properties, list) or not all(
        isinstance(p, dict) and isinstance(p.get("key"), str) and 0 < len(p["key"]) <= 255 and "value" in p
        for p in properties
    ):
        return _error(400, "", {"properties": "Each property needs a key (at most 255 characters) and a value."})
    return None


def _error(status: int, message: str, errors: dict[str, str] | None = None) -> Answer:
    return Answer(status, {"errorMessages": [message] if message else [], "errors": errors or {}}, Effect.REFUSED)


def _self(request: Request, path: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/jira/rest/api/3/{path}"


def _fields(issue: Row) -> dict[str, Any]:
    if issue.get("summary") is not None:  # generated: its text is stored
        subject, text = issue["summary"], issue.get("description") or ""
    else:  # first seen by key: its text derives from the key
        digest = int(hashlib.sha256(issue["key"].encode()).hexdigest(), 16)
        subject = _SUBJECTS[digest % len(_SUBJECTS)]
        text = f"{subject}. Reported by customer #{digest % 9000 + 1000}; affects {digest % 40 + 2} users."
    if issue["key"].startswith("BIN-"):
        text += " Pasted log: \u0000\u0000 exit=\ud83d (truncated)"
    return {
        "summary": subject,
        "description": _adf(text),
        "status": STATUSES[issue["status"]],
        "issuetype": {"name": "Bug"},
        "project": {"key": issue["key"].split("-")[0]},
        "labels": list(issue.get("labels") or []),
        "created": _jira_time(issue.get("created_at")),
        "updated": _jira_time(issue.get("updated_at")),
    }


def _jira_time(moment: datetime | None) -> str | None:
    """Jira's timestamps: milliseconds and a +hhmm offset (`2024-01-01T09:17:00.000+0000`)."""
    if moment is None:
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}" + moment.strftime("%z")


def _adf(text: str) -> dict[str, Any]:
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


def _comment(request: Request, row: Row, *, with_properties: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "self": _self(request, f"issue/{row['issue_key']}/comment/{row['id']}"),
        "id": str(row["id"]),
        "author": {"accountId": "standin-bot", "displayName": "TicketIQ"},
        "body": row["body"],
        "created": iso(row["created_at"]),
        "updated": iso(row["created_at"]),
        "jsdPublic": True,
    }
    if with_properties:
        out["properties"] = row["properties"]
    return out
