"""A workflow rig for the workflow tests: app processes in the test's event loop whose agents file
declares the test workflows, pointed at the Jira and incident.io stand-ins, and the API over a real
socket; and a process that "dies" as a SIGKILL leaves it (its liveness connection ended by the server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins
from ticketiq.entries.api import create_app

SUMMARISER: list[dict[str, Any]] = [
    {"calls": [{"tool": "jira_get_issue", "arguments": {"issue_key": "{jira_key}"}}]},
    {"text": "{jira_key} is about: {result:jira_get_issue.fields.summary|nothing}"},
]
SCRIPTS: dict[str, list[dict[str, Any]]] = {"summariser": SUMMARISER}
AGENTS: dict[str, dict[str, Any]] = {"summariser": {"tools": ["jira_get_issue"]}}
ISSUE = {"issue_key": "{{ input.issue }}"}
FOLLOW_UP: dict[str, Any] = {
    "owner": "flows",
    "tenant": "t1",
    "max_steps": 10,
    "steps": [
        {"id": "read", "tool": "jira_get_issue", "args": ISSUE},
        {"id": "summarise", "agent": "summariser", "input": "Summarise {{ input.issue }}"},
        {
            "id": "open",
            "tool": "incidentio_create_incident",
            "args": {
                "name": "{{ input.issue }}: {{ steps.read.output.fields.summary }}",
                "summary": "{{ steps.summarise.output }}",
                "severity": "minor",
            },
        },
        {
            "id": "comment",
            "tool": "jira_add_comment",
            "args": {
                "issue_key": "{{ input.issue }}",
                "body": "Incident {{ steps.open.output.incident.id }} after {{ executed }} steps",
            },
        },
        {
            "id": "check",
            "tool": "jira_get_issue",
            "args": ISSUE,
            "next": [
                {
                    "if": 'steps.check.output.fields.status.name != "Done" and steps.comment.visits < 2',
                    "goto": "comment",
                }
            ],
        },
    ],
}
RUNAWAY: dict[str, Any] = {
    "owner": "flows",
    "max_steps": 4,
    "steps": [{"id": "poll", "tool": "jira_get_issue", "args": ISSUE, "next": [{"goto": "poll"}]}],
}
# A write without a reader, its vendor deduping for minutes only (Discord's nonce): never sent again.
ANNOUNCE: dict[str, Any] = {
    "owner": "flows",
    "steps": [{"id": "announce", "tool": "discord_send_message",
               "args": {"channel_id": "ops", "content": "{{ input.issue }} is being looked at"}}],
}  # fmt: skip
WORKFLOWS = {"follow-up": FOLLOW_UP, "runaway": RUNAWAY, "announce": ANNOUNCE}
EXECUTED = ["read", "summarise", "open", "comment", "check", "comment", "check"]


@asynccontextmanager
async def app_process(db_url: str, tmp: Path, standins: Standins, name: str = "a", **kw: Any) -> AsyncIterator[Harness]:
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    vendors: dict[str, Any] = {"jira_url": standins.settings_env["TICKETIQ_JIRA_URL"], "jira_token": "t0ken",
                               "incidentio_url": standins.settings_env["TICKETIQ_INCIDENTIO_URL"],
                               "discord_url": standins.settings_env["TICKETIQ_DISCORD_URL"]}  # fmt: skip
    async with engine_under_test(db_url, folder, SCRIPTS, AGENTS, workflows=WORKFLOWS, **vendors, **kw) as h:
        yield h


@asynccontextmanager
async def api(h: Harness, role: str = "operator", name: str = "ops", agents: list[str] | None = None
              ) -> AsyncIterator[httpx.AsyncClient]:  # fmt: skip
    token = await h.token(name, role, agents)
    async with (
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        yield client


async def start(client: httpx.AsyncClient, issue: str, workflow: str = "follow-up") -> str:
    made = await client.post(f"/v1/workflows/{workflow}/runs", json={"input": {"issue": issue}})
    assert made.status_code == 201, made.text
    assert (made.json()["workflow"], made.json()["status"]) == (workflow, "queued")
    return str(made.json()["id"])


async def ended(client: httpx.AsyncClient, run_id: str, workflow: str = "follow-up") -> dict[str, Any]:
    shown: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal shown
        answer = await client.get(f"/v1/workflows/{workflow}/runs/{run_id}")
        if answer.status_code == 503:
            # A process that just lost its liveness mark replaces its pooled connections; a read caught by
            # that is answered "retry" (503, Retry-After), as the API promises, and a client retries.
            return False
        assert answer.status_code == 200, answer.text
        shown = answer.json()
        return str(shown["status"]) in ("succeeded", "failed", "cancelled", "interrupted")

    await eventually(done, 120, f"workflow run {run_id} ending")
    return shown


def keys_of(shown: dict[str, Any], step: str) -> list[str]:
    return [s["key"] for s in shown["steps"] if s["step"] == step]


async def held_at_vendor(standins: Standins) -> None:
    """The stand-in took the stall fault: the request is at the vendor, held there."""

    async def taken() -> bool:
        return bool((await standins.admin.get("/_standin/faults")).json() == [])

    await eventually(taken, 60, "the request reaching the stand-in")


async def holder_of(db_url: str, job_id: str) -> str:
    return str((await read_rows(db_url, "SELECT holder FROM jobs WHERE id = %s", job_id))[0]["holder"])

    await asyncio.sleep(0)
