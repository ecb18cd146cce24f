"""Teams stand-in: Bot Framework replies (under /teams) and their Graph read-back (under /graph/v1.0).

How a Bot Framework conversation id maps to Graph: a channel conversation id is
`19:<channel>@thread.tacv2;messageid=<root>`. Its Graph channel id is the part before `;`, the thread
is `<root>` (without `;messageid=`, the activity replied to is the root), and the team is the one
fixed team this stand-in holds, `TEAM_ID`. Replies in a personal chat (any other conversation id)
are accepted and recorded but, as in Teams, cannot be read back through the channel API.

A reply's adaptive card carries the step key in an element with id `ticketiq_step_key`; that is the
key each write is logged with.

Both take only the bot's own tokens from the stand-in token endpoint (`botframework.bearer_refusal`),
each for its scope: a missing, unknown, expired or wrong-scope token is answered 401, as the real
services do, and nothing is applied.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

from fastapi import APIRouter, Request, Response

from ticketiq.standins.records import Answer, Effect, Row, Session, Write, iso, jsonb
from ticketiq.standins.vendors import botframework
from ticketiq.standins.vendors.intake import IntakeDep, json_body

TEAM_ID = "standin-team"
STEP_KEY_ELEMENT = "ticketiq_step_key"
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
_REPLY_ID_BASE = 1_700_000_000_000  # reply ids look like Teams' millisecond message ids
_GRAPH_PAGE_MAX = 50
_GRAPH_PAGE_DEFAULT = 20


def thread_of(conversation_id: str, activity_id: str) -> tuple[str, str]:
    """(Graph channel id, thread root message id) of a conversation; the channel is the whole id
    and the root the activity when the conversation is not a channel thread."""
    channel, _, rest = conversation_id.partition(";")
    if rest.startswith("messageid="):
        return channel, rest.removeprefix("messageid=")
    return channel, activity_id


def bot_router() -> APIRouter:
    api = APIRouter()

    @api.post("/v3/conversations/{conversation_id}/activities/{activity_id}")
    async def reply(conversation_id: str, activity_id: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        authorization = request.headers.get("authorization")
        write = Write("teams", "reply", conversation_id, _carried_key(body), body)

        async def apply(session: Session) -> Answer:
            refused = await botframework.bearer_refusal(session, authorization, botframework.CONNECTOR_SCOPE)
            if refused is not None:
                return _unauthorized("Unauthorized", "Authorization has been denied for this request.", refused)
            problem = _activity_problem(body)
            if problem is not None:
                return problem
            channel_id, thread_id = thread_of(conversation_id, activity_id)
            row = await session.fetch_one(
                "standin.teams_reply_insert",
                {"channel_id": channel_id, "thread_id": thread_id, "activity": jsonb(body)},
            )
            assert row is not None
            reply_id = str(_REPLY_ID_BASE + row["seq"])
            return Answer(201, {"id": reply_id}, Effect.APPLIED, reply_id)

        return await intake.write(write, apply)

    return api


def graph_router() -> APIRouter:
    api = APIRouter()

    @api.get("/teams/{team_id}/channels/{channel_id}/messages/{message_id}/replies")
    async def replies(team_id: str, channel_id: str, message_id: str, request: Request, intake: IntakeDep) -> Response:
        query = request.query_params

        async def answer() -> Answer:
            refused = await botframework.bearer_refusal(
                intake.store, request.headers.get("authorization"), botframework.GRAPH_SCOPE
            )
            if refused is not None:
                said = "Access token is empty." if refused == "no bearer token" else "Access token validation failure."
                return _unauthorized("InvalidAuthenticationToken", said, refused)
            if team_id != TEAM_ID:
                return _error(404, "NotFound", f"No team found with Group Id {team_id}")
            top_text = query.get("$top", str(_GRAPH_PAGE_DEFAULT))
            if not top_text.isdigit() or not 1 <= int(top_text) <= _GRAPH_PAGE_MAX:
                return _error(
                    400,
                    "BadRequest",
                    f"Invalid page size specified: '{top_text}'. Must be between 1 and {_GRAPH_PAGE_MAX} inclusive.",
                )
            top = int(top_text)
            after = _decode_token(query.get("$skiptoken"))
            if after is None:
                return _error(400, "BadRequest", "Invalid $skiptoken.")
            rows = await intake.store.fetch_all(
                "standin.teams_replies_page",
                {"channel_id": channel_id, "thread_id": message_id, "after": after, "limit": top + 1},
            )
            page = rows[:top]
            out: dict[str, Any] = {
                "@odata.context": f"{request.base_url}graph/v1.0/$metadata#teams('{team_id}')/channels"
                f"('{channel_id}')/messages('{message_id}')/replies",
                "@odata.count": len(page),
                "value": [_chat_message(r, team_id, channel_id, message_id) for r in page],
            }
            if len(rows) > top:
                token = base64.urlsafe_b64encode(str(page[-1]["seq"]).encode()).decode()
                out["@odata.nextLink"] = str(request.url.include_query_params(**{"$skiptoken": token}))
            return Answer(200, out)

        return await intake.read("graph", "list_replies", answer)

    return api


def _decode_token(token: str | None) -> int | None:
    if token is None:
        return 0
    try:
        return int(base64.urlsafe_b64decode(token.encode()).decode())
    except ValueError:
        return None


def _carried_key(body: Any) -> str | None:
    if not isinstance(body, dict) or not isinstance(body.get("attachments"), list):
        return None
    for attachment in body["attachments"]:
        if isinstance(attachment, dict) and attachment.get("contentType") == ADAPTIVE:
            found = _find_element(attachment.get("content"))
            if found is not None:
                return found
    return None


def _find_element(node: Any) -> str | None:
    """The text of the card element with id `ticketiq_step_key`, wherever it is nested."""
    if isinstance(node, dict):
        text = node.get("text")
        if node.get("id") == STEP_KEY_ELEMENT and isinstance(text, str):
            return text
        nodes: list[Any] = list(node.values())
    elif isinstance(node, list):
        nodes = node
    else:
        return None
    for child in nodes:
        found = _find_element(child)
        if found is not None:
            return found
    return None


def _activity_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict) or body.get("type") != "message":
        return _error(400, "BadArgument", "Activity must be a JSON object of type 'message'.")
    attachments = body.get("attachments", [])
    if not isinstance(attachments, list) or not all(
        isinstance(a, dict) and isinstance(a.get("contentType"), str) for a in attachments
    ):
        return _error(400, "BadArgument", "Each attachment needs a contentType.")
    if not body.get("text") and not attachments:
        return _error(400, "BadArgument", "Activity has neither text nor attachments.")
    return None


def _error(status: int, code: str, message: str) -> Answer:
    return Answer(status, {"error": {"code": code, "message": message}}, Effect.REFUSED)


def _unauthorized(code: str, message: str, why: str) -> Answer:
    """A 401 in the service's words; why, in the challenge (RFC 6750), for whoever reads the stand-in's log."""
    challenge = f'Bearer error="invalid_token", error_description="{why}"'
    return Answer(401, {"error": {"code": code, "message": message}}, Effect.REFUSED,
                  headers={"WWW-Authenticate": challenge})  # fmt: skip


def _chat_message(row: Row, team_id: str, channel_id: str, thread_id: str) -> dict[str, Any]:
    reply_id = str(_REPLY_ID_BASE + row["seq"])
    activity = row["activity"]
    attachments = []
    for index, attachment in enumerate(activity.get("attachments", [])):
        attachments.append(
            {
                "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{reply_id}/{index}")),
                "contentType": attachment["contentType"],
                "contentUrl": None,
                # Graph hands card content back as a JSON string, not an object.
                "content": json.dumps(attachment.get("content")),
                "name": None,
                "thumbnailUrl": None,
            }
        )
    tags = "".join(f'<attachment id="{a["id"]}"></attachment>' for a in attachments)
    return {
        "id": reply_id,
        "replyToId": thread_id,
        "etag": reply_id,
        "messageType": "message",
        "createdDateTime": iso(row["created_at"]),
        "lastModifiedDateTime": iso(row["created_at"]),
        "deletedDateTime": None,
        "subject": None,
        "importance": "normal",
        "from": {
            "user": None,
            "application": {"id": "standin-bot", "displayName": "TicketIQ", "applicationIdentityType": "bot"},
        },
        "body": {"contentType": "html", "content": f"{activity.get('text') or ''}{tags}"},
        "attachments": attachments,
        "channelIdentity": {"teamId": team_id, "channelId": channel_id},
    }
