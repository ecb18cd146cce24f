"""The A2A entry point's test rig: an app process over the stand-in model and a probe vendor, served on a
real socket, with the a2a-sdk's own client (protocol 1.0) and plain JSON-RPC for the v0.3 names."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest, StreamResponse, Task, TaskState

from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
ASK: dict[str, Any] = {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]}
STAGING = "Delete the staging database?"
PRODUCTION = "Delete the production database too?"
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "answerer": [READ, {"text": "answered {jira_key}"}],
    "writer": [WRITE, {"text": "wrote {jira_key}"}],
    "asker": [ASK, {"text": "deploying to {result:request_input.input}"}],
    # Two questions in a row: an answer to the first must never answer the second (I18).
    "careful": [
        {"calls": [{"tool": "request_input", "arguments": {"question": STAGING}}]},
        {"calls": [{"tool": "request_input", "arguments": {"question": PRODUCTION}}]},
        {"text": "production: {result:request_input.input}"},
    ],
    # Both questions in one step: two questions pending at once.
    "both": [
        {"calls": [{"tool": "request_input", "arguments": {"question": q}} for q in (STAGING, PRODUCTION)]},
        {"text": "done: {result:request_input.input}"},
    ],
}
AGENTS = {
    "answerer": {"tools": ["probe_read"], "description": "Reads a ticket and answers."},
    "writer": {"tools": ["probe_write"], "description": "Writes to the probe."},
    "asker": {"tools": [], "description": "Asks which environment first."},
    "careful": {"tools": [], "description": "Asks before it deletes each database."},
    "both": {"tools": [], "description": "Asks both questions at once."},
}
ACTOR = "ops"


@dataclass
class A2A:
    h: Harness
    base: str  # the app's base URL
    token: str  # ACTOR's, an admin

    @asynccontextmanager
    async def client(
        self, token: str | None = None, streaming: bool = False, polling: bool = False
    ) -> AsyncIterator[Client]:
        """The sdk's client, made from the agent card as any A2A client makes it."""
        headers = {"Authorization": f"Bearer {token or self.token}"}
        async with httpx.AsyncClient(verify=TLS, timeout=30, headers=headers) as http:
            config = ClientConfig(httpx_client=http, streaming=streaming, polling=polling)
            client = await ClientFactory(config).create_from_url(self.base)
            async with client:
                yield client

    async def rpc(self, method: str, params: dict[str, Any], token: str | None = None) -> dict[str, Any]:
        """One v0.3 JSON-RPC call over plain httpx (no A2A-Version header: a 0.3 client sends none)."""
        async with httpx.AsyncClient(verify=TLS, base_url=self.base, timeout=30) as http:
            response = await http.post(
                "/a2a",
                json={"jsonrpc": "2.0", "id": 7, "method": method, "params": params},
                headers={"Authorization": f"Bearer {token or self.token}"},
            )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


@asynccontextmanager
async def a2a(
    db_url: str,
    tmp: Path,
    scripts: dict[str, list[dict[str, Any]]] = SCRIPTS,
    agents: dict[str, dict[str, Any]] = AGENTS,
    **kw: Any,
) -> AsyncIterator[A2A]:
    async with engine_under_test(db_url, tmp, scripts, agents, **kw) as h:
        token = await h.token(ACTOR, "admin")
        async with serving(create_app(h.settings, h.process)) as base:
            yield A2A(h, base, token)


def message(text: str, message_id: str, agent: str | None = "answerer", task_id: str = "") -> SendMessageRequest:
    sent = Message(role=Role.ROLE_USER, message_id=message_id, task_id=task_id, parts=[Part(text=text)])
    if agent is not None:
        sent.metadata.update({"agent": agent})
    return SendMessageRequest(message=sent)


async def send(client: Client, request: SendMessageRequest) -> Task:
    """A blocking send: the task once it ended or waits for its client."""
    answers = [r async for r in client.send_message(request)]
    assert len(answers) == 1 and answers[0].HasField("task"), answers
    return answers[0].task


def states(events: list[StreamResponse]) -> list[TaskState]:
    found: list[TaskState] = []
    for e in events:
        if e.HasField("task"):
            found.append(e.task.status.state)
        elif e.HasField("status_update"):
            found.append(e.status_update.status.state)
    return found


async def count(db_url: str, table: str) -> int:
    rows = await read_rows(db_url, f"SELECT count(*) AS n FROM {table}")
    return int(rows[0]["n"])


def text_of(task: Task) -> str:
    return task.status.message.parts[0].text if task.status.HasField("message") else ""


def v03_message(text: str, message_id: str, **extra: Any) -> dict[str, Any]:
    return {"message": {"kind": "message", "role": "user", "messageId": message_id,
                        "parts": [{"kind": "text", "text": text}], **extra}}  # fmt: skip
