"""I16: JSON nested deep enough to be a RecursionError wherever it is read is measured before it is
parsed, wherever outside JSON comes in: request bodies (`entries/text_guard.py`, 422 naming `body`), the
model's tool-call arguments (told to the model as the call's error) and vendors' answers (kept as text).
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI
from fastapi.responses import Response

from tests.support.http import TLS, serving
from ticketiq.model.client import parse_arguments
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext
from ticketiq.tools.http import Send, request
from ticketiq.values.json_depth import MAX_DEPTH

DEEP = '{"a": ' * 5000 + "1" + "}" * 5000  # json.loads alone raises RecursionError on this


def test_tool_call_arguments_nested_past_the_limit_are_refused_as_arguments_not_raised() -> None:
    arguments, error = parse_arguments(DEEP)
    assert (arguments, error) == ({}, f"arguments are JSON nested deeper than {MAX_DEPTH} levels")
    at_limit = '{"a": ' * MAX_DEPTH + "1" + "}" * MAX_DEPTH
    assert parse_arguments(at_limit)[1] is None


async def test_a_vendor_answer_nested_past_the_limit_is_kept_as_its_text() -> None:
    app = FastAPI()

    @app.get("/deep")
    async def deep() -> Response:
        return Response(DEEP, media_type="application/json")

    async with serving(app) as base, httpx.AsyncClient(verify=TLS) as client:
        ctx = CallContext(run_id="r", tool="t", args={}, key="k", http=client, settings=Settings())
        reply = await request(ctx, "probe", "GET", f"{base}/deep", send=Send.READ)
    assert reply.status == 200
    assert reply.body == DEEP  # text, not a value a reader would recurse into
