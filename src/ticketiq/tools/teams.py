"""Teams: reply in a conversation through the Bot Framework; read the reply back through Graph.

The reply is an Adaptive card whose hidden element `ticketiq_step_key` holds the step key. Graph
returns a card's content as a JSON string; the reader parses it and looks for that element.

Reading back needs the Graph team id (`team_id`, the incoming activity's
`channelData.team.aadGroupId`) and a channel thread: a conversation id
`19:<channel>@thread.tacv2;messageid=<root>` names the channel (before `;`) and the thread root
(without `;messageid=`, the activity replied to is the root). Without a team id, or in a personal
chat, there is no reader: the outcome of an in-doubt reply is reported unknown.

`HAND_ON` is the reply of a Teams turn (the hand-on of a run on the `teams` channel): the engine makes
it, never a model (`tools.builtin.ENGINE_CALLS`). It goes to the serviceUrl of the incoming activity (the
one its Bot Framework token named) and carries the answer and a link to the run; it is read back the
same way.

Both the connector and Graph take the bot's own tokens, bought by the client-credentials grant with its
app id and password (`tools/app_tokens.py`; TICKETIQ_TEAMS_TOKEN_URL and TICKETIQ_GRAPH_TOKEN_URL). A 401
applied nothing: the token it refused is dropped, a fresh one bought and the request sent once more; a
second 401 fails it with the reason. No token to be had fails a reply as not sent (never in doubt).
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote

from ticketiq.settings import Settings
from ticketiq.tools import app_tokens
from ticketiq.tools.app_tokens import Grant
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.http import Reply, Send, VendorFailed, request

log = logging.getLogger(__name__)

VENDOR = "teams"
STEP_KEY_ELEMENT = "ticketiq_step_key"
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
_GRAPH_PAGE = 50  # Graph's most per page for replies
_GRAPH_PAGES_MAX = 200


def tools(settings: Settings) -> list[Tool]:
    params = {
        "type": "object",
        "properties": {
            "conversation_id": {"type": "string", "minLength": 1, "maxLength": 512},
            "activity_id": {"type": "string", "minLength": 1, "maxLength": 256},
            "text": {"type": "string", "minLength": 1, "maxLength": 20000},
            "team_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 256,
                "description": "Graph id of the team (channelData.team.aadGroupId); lets the reply be read back",
            },
        },
        "required": ["conversation_id", "activity_id", "text"],
        "additionalProperties": False,
    }
    return [
        Tool(
            "teams_reply",
            "Reply in a Teams conversation, as a card.",
            params,
            ToolClass.WRITE,
            reply,
            reader=find_reply,
            vendor=VENDOR,
        ),
    ]


def card(text: str, key: str) -> dict[str, Any]:
    return {
        "type": "AdaptiveCard",
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "version": "1.5",
        "body": [
            {"type": "TextBlock", "text": text, "wrap": True},
            {"type": "TextBlock", "id": STEP_KEY_ELEMENT, "text": key, "isVisible": False},
        ],
    }


def graph_thread(conversation_id: str, activity_id: str) -> tuple[str, str] | None:
    """(channel id, thread root id) of a channel conversation; None for a personal or group chat."""
    channel, _, rest = conversation_id.partition(";")
    if not channel.startswith("19:") or "@thread." not in channel:
        return None
    if rest.startswith("messageid="):
        return channel, rest.removeprefix("messageid=")
    return channel, activity_id


async def reply(ctx: CallContext) -> Outcome:
    return await _post(ctx, ctx.settings.teams_service_url, card(ctx.args["text"], ctx.key))


async def _post(ctx: CallContext, service_url: str, content: dict[str, Any]) -> Outcome:
    """A reply to the activity `activity_id` of the conversation, through the connector at `service_url`."""
    conversation = quote(ctx.args["conversation_id"], safe="")
    activity = quote(ctx.args["activity_id"], safe="")
    url = f"{service_url.rstrip('/')}/v3/conversations/{conversation}/activities/{activity}"
    body = {
        "type": "message",
        "replyToId": ctx.args["activity_id"],
        "attachments": [{"contentType": ADAPTIVE, "content": content}],
    }
    answer = await _authorized(ctx, connector_grant(ctx.settings), VENDOR, "POST", url, send=Send.UNKEYED, json=body)
    return Outcome(ok=True, result={"id": answer.body["id"]})


def connector_grant(settings: Settings) -> Grant:
    return _grant(settings, settings.teams_token_url, "TICKETIQ_TEAMS_TOKEN_URL", settings.teams_token_scope,
                  "TICKETIQ_TEAMS_TOKEN_SCOPE")  # fmt: skip


def graph_grant(settings: Settings) -> Grant:
    return _grant(settings, settings.graph_token_url, "TICKETIQ_GRAPH_TOKEN_URL", settings.graph_token_scope,
                  "TICKETIQ_GRAPH_TOKEN_SCOPE")  # fmt: skip


def _grant(settings: Settings, url: str, url_setting: str, scope: str, scope_setting: str) -> Grant:
    """The bot's credentials for a scope; VendorFailed (nothing sent) while a setting they need is unset."""
    app_id, password = settings.teams_app_id, settings.teams_app_password
    if not app_id or not password:
        unset = "TICKETIQ_TEAMS_APP_ID" if not app_id else "TICKETIQ_TEAMS_APP_PASSWORD"
        error = f"{unset} is unset: the bot has no credentials to buy a token with, so nothing was sent"
        raise VendorFailed(Outcome(ok=False, error=error))
    return Grant(url, app_id, scope, url_setting, "TICKETIQ_TEAMS_APP_ID", "TICKETIQ_TEAMS_APP_PASSWORD",
                 scope_setting, password)  # fmt: skip


async def _authorized(
    ctx: CallContext,
    grant: Grant,
    vendor: str,
    method: str,
    url: str,
    *,
    send: Send,
    json: Any = None,
    params: Any = None,
) -> Reply:
    """`request` with the bot's token for `grant`'s scope. A 401 applied nothing (the token is checked
    before anything else), so the refused token is dropped and the request sent once more with a fresh one."""
    tokens = app_tokens.of(ctx.http)
    for tries in (1, 2):
        token = await tokens.token(grant, ctx.http, ctx.settings.http_timeout_s, ctx.settings.vendor_max_retries)
        auth = {"Authorization": f"Bearer {token}"}
        try:
            return await request(ctx, vendor, method, url, send=send, headers=auth, json=json, params=params)
        except VendorFailed as failed:
            if not _token_refused(failed):
                raise
            tokens.drop(grant, token)
            if tries == 2:
                error = (f"{failed.outcome.error}; refused again with a freshly bought token: check that "
                         f"{grant.id_setting} is the bot's app id and that it may use {grant.scope}")  # fmt: skip
                raise VendorFailed(Outcome(ok=False, error=error), 401) from failed
        log.info("run %s: %s refused the bot's token (401); sending once more with a fresh one", ctx.run_id, vendor)
    raise AssertionError("unreachable: the second refusal raised")


def _token_refused(failed: VendorFailed) -> bool:
    """A 401 to a request that applied nothing (no earlier try of it may have reached the vendor)."""
    return failed.status == 401 and not failed.outcome.uncertain


async def find_reply(ctx: CallContext) -> ReadBack:
    thread = graph_thread(ctx.args["conversation_id"], ctx.args["activity_id"])
    team = ctx.args.get("team_id")
    if thread is None or not team:
        return ReadBack(found=None)
    channel, root = thread
    graph = ctx.settings.graph_url.rstrip("/")
    url: str | None = (
        f"{graph}/teams/{quote(team, safe='')}/channels/{quote(channel, safe='')}"
        f"/messages/{quote(root, safe='')}/replies"
    )
    params: dict[str, Any] | None = {"$top": _GRAPH_PAGE}
    grant = graph_grant(ctx.settings)
    for _ in range(_GRAPH_PAGES_MAX):
        if url is None:
            return ReadBack(found=False)
        if not url.startswith(graph):
            return ReadBack(found=None)  # a next link elsewhere does not get our token
        page = await _authorized(ctx, grant, "graph", "GET", url, send=Send.READ, params=params)
        for message in page.body["value"]:
            if any(_carries(a, ctx.key) for a in message.get("attachments") or []):
                return ReadBack(found=True, outcome=Outcome(ok=True, result={"id": message["id"]}))
        url, params = page.body.get("@odata.nextLink"), None  # the next link carries its own query
    return ReadBack(found=None)


def _carries(attachment: dict[str, Any], key: str) -> bool:
    if attachment.get("contentType") != ADAPTIVE or not isinstance(attachment.get("content"), str):
        return False
    try:
        content = json.loads(attachment["content"])
    except ValueError:
        return False
    return _element_text(content) == key


def _element_text(node: Any) -> str | None:
    if isinstance(node, dict):
        text = node.get("text")
        if node.get("id") == STEP_KEY_ELEMENT and isinstance(text, str):
            return text
        children: list[Any] = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _element_text(child)
        if found is not None:
            return found
    return None


# ----- a Teams turn's reply (its hand-on) ----------------------------------------------------------------

HAND_ON_ANSWER_MAX = 20000

HAND_ON_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service_url": {"type": "string", "minLength": 1, "maxLength": 2048, "pattern": "^https?://"},
        "conversation_id": {"type": "string", "minLength": 1, "maxLength": 1024},
        "activity_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "team_id": {"type": ["string", "null"], "maxLength": 256},
        "text": {"type": "string", "minLength": 1, "maxLength": HAND_ON_ANSWER_MAX},
        "run_url": {"type": "string", "minLength": 1, "maxLength": 2048},
    },
    "required": ["service_url", "conversation_id", "activity_id", "text", "run_url"],
    "additionalProperties": False,
}


def hand_on_card(text: str, run_url: str, key: str) -> dict[str, Any]:
    """The answer, the run's link as an action, and the step key it is read back by."""
    return {**card(text, key), "actions": [{"type": "Action.OpenUrl", "title": "Open the run", "url": run_url}]}


async def post_hand_on(ctx: CallContext) -> Outcome:
    content = hand_on_card(ctx.args["text"], ctx.args["run_url"], ctx.key)
    return await _post(ctx, ctx.args["service_url"], content)


HAND_ON = Tool(
    "teams_hand_on",
    "A Teams turn's reply: the run's answer and its link, to the activity that started the turn.",
    HAND_ON_PARAMS,
    ToolClass.WRITE,
    post_hand_on,
    reader=find_reply,
    vendor=VENDOR,
)
