"""CPU per model request: the openai package's `chat.completions.create` beside `ModelClient.complete`.

    .venv/bin/python bench/model_client.py [--requests 400]

The stand-in model (the router `ticketiq standins` serves, latency 0) runs in a child process, so the
CPU counted here (time.process_time) is the client's alone: building the request, sending it, reading
the answer. Both paths go through the same ModelClient's openai client and connection pool, for a short
conversation (2 messages) and a long one (30 messages with tool calls and their results), 6 tools
offered. `sdk create` is the path ModelClient took before issue 19 (the reply's conversion to a
ModelReply, a small part of it, not included); `complete` is the path it takes now. Beside them, in the
same run: `app transport`, `complete` as an app process makes it (on a VendorTransport, the request
prepared once and a plain answer read without httpx's Request and Response), and `floor`, the same
body POSTed by a bare aiohttp session and its answer parsed by orjson, what any client must pay.
Prints figures, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import aiohttp
import openai
import orjson

from child_server import serving
from ticketiq.model import ModelClient
from ticketiq.settings import Settings
from ticketiq.tools.vendor_pool import VendorTransport

_SERVER = """
import sys, uvicorn
from fastapi import FastAPI
from ticketiq.standins.model import create_router
app = FastAPI()
app.include_router(create_router(0, False))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def tools() -> list[dict[str, Any]]:
    def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
        parameters = {"type": "object", "properties": properties, "required": list(properties)}
        return {
            "type": "function",
            "function": {"name": name, "description": f"The {name} tool.", "parameters": parameters},
        }

    text = {"type": "string", "description": "Free text."}
    return [
        tool("jira_get_issue", {"issue_key": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"}}),
        tool("jira_add_comment", {"issue_key": {"type": "string"}, "body": text}),
        tool("incidentio_create_incident", {"name": text, "severity": {"type": "string", "enum": ["minor", "major"]}}),
        tool("teams_reply", {"conversation_id": text, "activity_id": text, "text": text}),
        tool("sqs_send_message", {"message_body": text, "message_group_id": text}),
        tool("webhook_post", {"url": {"type": "string", "format": "uri"}, "payload": {"type": "object"}}),
    ]


def conversation(rounds: int) -> list[dict[str, Any]]:
    """System and user, then `rounds` rounds of an assistant message with 3 tool calls and their results."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an operations agent. Read the issue, then answer in one line."},
        {"role": "user", "content": "Checkout is failing for some customers, see OPS-123 please."},
    ]
    for turn in range(rounds):
        calls = [
            {
                "id": f"call_{turn}_{n}",
                "type": "function",
                "function": {"name": "jira_get_issue", "arguments": json.dumps({"issue_key": "OPS-123"})},
            }
            for n in range(3)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for n in range(3):
            result = {"key": "OPS-123", "fields": {"summary": "Checkout fails", "status": "Open", "labels": ["web"]}}
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}_{n}", "content": json.dumps(result)})
    return messages


async def cpu_per_request(ask: Callable[[], Awaitable[object]], requests: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per request, after a warm-up."""
    for _ in range(max(20, requests // 10)):
        await ask()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(requests):
        await ask()
    return (time.process_time() - cpu) * 1000 / requests, (time.perf_counter() - wall) * 1000 / requests


async def measure(base_url: str, requests: int) -> None:
    settings = Settings(model_base_url=base_url, model_api_key="sk-bench")
    client = ModelClient(settings)
    app = ModelClient(settings, transport=VendorTransport(settings.model_connections))
    bare = aiohttp.ClientSession()
    offered = tools()
    try:
        print(f"openai {openai.__version__}, {requests} requests each, CPU of this process per request")
        print(f"{'conversation':<40} {'path':<14} {'cpu ms':>7} {'wall ms':>8}")
        for name, messages in (
            ("short (2 messages)", conversation(0)),
            ("long (30 messages, 21 calls)", conversation(7)),
        ):

            async def sdk(messages: list[dict[str, Any]] = messages) -> object:
                return await client._openai.chat.completions.create(
                    model="reader", messages=cast(Any, messages), tools=cast(Any, offered)
                )

            async def ours(messages: list[dict[str, Any]] = messages) -> object:
                return await client.complete(model="reader", messages=messages, tools=offered)

            async def in_app(messages: list[dict[str, Any]] = messages) -> object:
                return await app.complete(model="reader", messages=messages, tools=offered)

            async def floor(messages: list[dict[str, Any]] = messages) -> object:
                body = orjson.dumps({"model": "reader", "messages": messages, "tools": offered})
                headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
                async with bare.post(base_url + "/chat/completions", data=body, headers=headers) as answer:
                    return orjson.loads(await answer.read())

            figures = {}
            for path, ask in (("sdk create", sdk), ("complete", ours), ("app transport", in_app), ("floor", floor)):
                figures[path] = await cpu_per_request(ask, requests)
                cpu, wall = figures[path]
                print(f"{name + ', 6 tools':<40} {path:<14} {cpu:>7.3f} {wall:>8.3f}")
            ratio = figures["sdk create"][0] / figures["complete"][0]
            print(f"{'':<40} {'sdk / complete':<14} {ratio:>7.2f}")
            print(f"{'':<40} {'app / floor':<14} {figures['app transport'][0] / figures['floor'][0]:>7.2f}")
    finally:
        await client.close()
        await app.close()
        await bare.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    with serving(_SERVER, "/v1/models") as base:
        asyncio.run(measure(base + "/v1", args.requests))


if __name__ == "__main__":
    main()
