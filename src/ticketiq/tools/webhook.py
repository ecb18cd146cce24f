"""A generic webhook: POST a JSON payload to a path under `TICKETIQ_WEBHOOK_URL`, with the step key as
its `Idempotency-Key` header.

Only the target knows whether it honours the key; `TICKETIQ_WEBHOOK_DEDUPE_WINDOW_S` says how long it
does. With a window, the tool is a keyed write (resent with the same key when the window outlasts a
resume, I9); without one, a plain write that is reported unknown when in doubt. There is no reader.
"""

from __future__ import annotations

from typing import Any

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass
from ticketiq.tools.http import Send, request

VENDOR = "webhook"
# Path segments of unreserved characters, no `.` or `..` segment: the model picks a path on the
# configured target, never another target.
_PATH = r"^(?!\.{1,2}(/|$))(?!.*/\.{1,2}(/|$))[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*$"


def tools(settings: Settings) -> list[Tool]:
    keyed = settings.webhook_dedupe_window_s > 0
    params = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 512, "pattern": _PATH},
            "payload": {"type": "object"},
        },
        "required": ["path", "payload"],
        "additionalProperties": False,
    }

    async def post(ctx: CallContext) -> Outcome:
        return await _post(ctx, Send.KEYED if keyed else Send.UNKEYED)

    return [
        Tool(
            "webhook_post",
            "POST a JSON payload to the configured webhook target.",
            params,
            ToolClass.KEYED_WRITE if keyed else ToolClass.WRITE,
            post,
            dedupe_window_s=settings.webhook_dedupe_window_s if keyed else None,
            vendor=VENDOR,
        ),
    ]


async def _post(ctx: CallContext, send: Send) -> Outcome:
    url = f"{ctx.settings.webhook_url.rstrip('/')}/{ctx.args['path']}"
    reply = await request(
        ctx, VENDOR, "POST", url, send=send, headers={"Idempotency-Key": ctx.key}, json=ctx.args["payload"]
    )
    result: dict[str, Any] = {"status": reply.status, "response": reply.body}
    return Outcome(ok=True, result=result)
