"""Discord: post a channel message with the step key as its nonce and `enforce_nonce` set.

Discord then returns the original message for a repeat by the same bot within a few minutes. That
is far shorter than a resume can take, so the tool is a plain write: an in-doubt send is settled,
never resent (I9), and there is no reader.
"""

from __future__ import annotations

import hashlib
from urllib.parse import quote

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass
from ticketiq.tools.http import Send, request

VENDOR = "discord"
NONCE_MAX = 25


def nonce_for(key: str) -> str:
    """The key itself when it fits (step keys do); else a digest of it, since a cut-off prefix could
    be shared by two keys and make Discord drop a different message as a repeat."""
    return key if len(key) <= NONCE_MAX else hashlib.sha256(key.encode()).hexdigest()[:NONCE_MAX]


def tools(settings: Settings) -> list[Tool]:
    params = {
        "type": "object",
        "properties": {
            "channel_id": {"type": "string", "minLength": 1, "maxLength": 64},
            "content": {"type": "string", "minLength": 1, "maxLength": 2000},
        },
        "required": ["channel_id", "content"],
        "additionalProperties": False,
    }
    return [
        Tool(
            "discord_send_message",
            "Post a message in a Discord channel.",
            params,
            ToolClass.WRITE,
            send_message,
            vendor=VENDOR,
        )
    ]


async def send_message(ctx: CallContext) -> Outcome:
    url = f"{ctx.settings.discord_url.rstrip('/')}/channels/{quote(ctx.args['channel_id'], safe='')}/messages"
    body = {"content": ctx.args["content"], "nonce": nonce_for(ctx.key), "enforce_nonce": True}
    auth = {"Authorization": f"Bot {ctx.settings.discord_token}"}
    reply = await request(ctx, VENDOR, "POST", url, send=Send.UNKEYED, headers=auth, json=body)
    return Outcome(ok=True, result={"message_id": reply.body["id"], "channel_id": reply.body["channel_id"]})
