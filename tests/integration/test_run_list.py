"""`GET /v1/runs` over a real socket and Postgres: pages that are complete and never repeat a run while
runs are made, every filter, who sees what, bad input named, and what a waiting run waits for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import until
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.views import run_list

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "asker": [
        {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment for {jira_key}?"}}]},
        {"text": "noted {jira_key}"},
    ],
    "answerer": [{"text": "the giraffe ate {jira_key}"}],
    "holder": [{"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}, {"text": "wrote"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "asker": {"tools": []},
    "answerer": {"tools": []},
    "holder": {"tools": ["probe_write"]},
}


@asynccontextmanager
async def listing(db_url: str, tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    # No leader: the queued runs these tests make stay queued (no sweep starts them).
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"], lead=False) as h:
        token = await h.token("ops", "operator")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield client, h


async def page(client: httpx.AsyncClient, token: str | None = None, **params: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    response = await client.get("/v1/runs", params=params, headers=headers)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


async def ids(client: httpx.AsyncClient, token: str | None = None, **params: Any) -> list[str]:
    return [r["id"] for r in (await page(client, token, **params))["runs"]]


async def started(client: httpx.AsyncClient, token: str, text: str) -> str:
    """A run started through the API with `token`: its `created_by`."""
    response = await client.post("/v1/runs", json={"agent": "answerer", "input": text},
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def made(h: Harness, agent: str, text: str, **kw: Any) -> str:
    """A queued run, made as an entry point makes one (not started)."""
    return await h.run(agent, text, **kw)


async def test_paging_shows_every_run_once_newest_first_while_runs_are_made(db_url: str, tmp_path: Path) -> None:
    async with listing(db_url, tmp_path) as (client, h):
        before = [await made(h, "answerer", f"Look at OPS-{i}", created_by="ops") for i in range(23)]
        # Ten runs made in one instant: the run id orders them, and the cursor must not lose or repeat one.
        await read_rows(db_url, "UPDATE runs SET created_at = '2025-05-01T08:00:00Z' WHERE id = ANY(%s::uuid[])",
                        before[5:15])  # fmt: skip
        seen: list[dict[str, Any]] = []
        made_meanwhile: list[str] = []
        cursor = None
        while True:
            shown = await page(client, limit=4, **({"cursor": cursor} if cursor else {}))
            seen += shown["runs"]
            made_meanwhile.append(await made(h, "answerer", "Look at OPS-99", created_by="ops"))
            cursor = shown["next_cursor"]
            if cursor is None:
                break
        listed = [r["id"] for r in seen]
        assert len(listed) == len(set(listed))  # no run twice
        assert set(before) <= set(listed)  # every run that existed when paging began
        keys = [(datetime.fromisoformat(r["created_at"]), r["id"]) for r in seen]
        assert keys == sorted(keys, reverse=True)  # newest first, the id breaking ties
        assert not set(made_meanwhile) & set(listed)  # made after the first page: before it, never in a later one
        assert (await ids(client, limit=1))[0] == made_meanwhile[-1]


async def test_each_filter_selects_its_runs(db_url: str, tmp_path: Path) -> None:
    async with listing(db_url, tmp_path) as (client, h):
        api_run = (await client.post("/v1/runs", json={"agent": "answerer", "input": "Look at OPS-7 zebra"})).json()
        answered = await until(client, api_run["id"], "succeeded")
        waiting = (await client.post("/v1/runs", json={"agent": "asker", "input": "Note OPS-8"})).json()["id"]
        await until(client, waiting, "waiting")
        teams = await made(h, "asker", "Look at OPS-9 from teams", channel="teams", created_by="teams-bot")
        old = await made(h, "answerer", "Look at OPS-10 long ago", created_by="ops")
        await read_rows(db_url, "UPDATE runs SET created_at = now() - interval '3 days' WHERE id = %s", old)

        assert await ids(client, status="waiting") == [waiting]
        assert set(await ids(client, status=["waiting", "succeeded"])) == {waiting, answered["id"]}
        assert set(await ids(client, status="queued")) == {teams, old}
        assert set(await ids(client, agent="asker")) == {waiting, teams}
        assert await ids(client, channel="teams") == [teams]
        assert await ids(client, created_by="teams-bot") == [teams]
        assert set(await ids(client, created_by="ops")) == {api_run["id"], waiting, old}
        a_day_ago = (datetime.fromisoformat(answered["created_at"]) - timedelta(days=1)).isoformat()
        assert old not in await ids(client, since=a_day_ago)
        assert await ids(client, until=a_day_ago) == [old]
        assert await ids(client, since=a_day_ago, agent="answerer") == [api_run["id"]]
        # q: words of the input, or of the answer; every word given.
        assert await ids(client, q="zebra") == [api_run["id"]]
        assert await ids(client, q="giraffe") == [api_run["id"]]  # its answer: "the giraffe ate OPS-7"
        assert await ids(client, q="giraffe ate OPS-7") == [api_run["id"]]
        assert await ids(client, q="giraffe OPS-8") == []
        assert await ids(client, q="teams", status="queued") == [teams]
        assert await ids(client, q="nothing-like-this") == []


async def test_a_caller_sees_only_its_own_runs_and_an_operator_sees_all(db_url: str, tmp_path: Path) -> None:
    async with listing(db_url, tmp_path) as (client, h):
        ana, bob = await h.token("ana", "caller"), await h.token("bob", "caller")
        admin = await h.token("root", "admin")
        by_ana = [await started(client, ana, f"Look at OPS-{i}") for i in range(3)]
        by_bob = await started(client, bob, "Look at OPS-5")
        by_nobody = await made(h, "answerer", "Look at OPS-6")  # an entry point's run: no token made it
        assert set(await ids(client, ana)) == set(by_ana)
        assert await ids(client, bob) == [by_bob]
        assert await ids(client, ana, created_by="bob") == []  # naming another token widens nothing
        assert await ids(client, bob, q="OPS-1") == []
        # Paged, a caller still sees only its own.
        first = await page(client, ana, limit=2)
        rest = await page(client, ana, limit=2, cursor=first["next_cursor"])
        assert {r["id"] for r in first["runs"] + rest["runs"]} == set(by_ana) and rest["next_cursor"] is None
        everyone = {*by_ana, by_bob, by_nobody}
        assert set(await ids(client)) == everyone  # operator
        assert set(await ids(client, admin)) == everyone
        counted = await h.process.views.run_counts("bob")
        assert set(counted) == set(run_list.STATUSES) and sum(counted.values()) == 1
        assert sum((await h.process.views.run_counts("ana")).values()) == 3
        assert sum((await h.process.views.run_counts(None)).values()) == 5


@pytest.mark.parametrize(
    ("query", "loc"),
    [
        ("limit=0", ["query", "limit"]),
        ("limit=501", ["query", "limit"]),
        ("status=cancelled", ["query", "status"]),
        ("since=yesterday", ["query", "since"]),
        ("since=2025-05-02&until=2025-05-01", ["query", "until"]),
        ("cursor=bm90IGEgY3Vyc29y", ["query", "cursor"]),
        ("agent=a&agent=b", ["query", "agent"]),
        ("q=%21%21", ["query", "q"]),
        ("state=waiting", ["query", "state"]),
    ],
)
async def test_bad_input_is_422_naming_the_parameter(db_url: str, tmp_path: Path, query: str, loc: list[str]) -> None:
    async with listing(db_url, tmp_path) as (client, _):
        response = await client.get(f"/v1/runs?{query}")
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


async def test_a_waiting_run_shows_the_oldest_thing_it_waits_for(db_url: str, tmp_path: Path) -> None:
    async with listing(db_url, tmp_path) as (client, _):
        asking = (await client.post("/v1/runs", json={"agent": "asker", "input": "Note OPS-11"})).json()["id"]
        holding = (await client.post("/v1/runs", json={"agent": "holder", "input": "Write OPS-12"})).json()["id"]
        asked = await until(client, asking, "waiting")
        held = await until(client, holding, "waiting")
        listed = {r["id"]: r for r in (await page(client, status="waiting"))["runs"]}
        question = listed[asking]["waiting_for"]
        assert question == {"kind": "input", "question": "Which environment for OPS-11?",
                            "question_id": question["question_id"]}  # fmt: skip
        assert asked["waiting_for"] == question and asked["waiting_for_all"] == [question]
        approval = listed[holding]["waiting_for"]
        assert approval == {"kind": "approval", "approval_id": approval["approval_id"], "tool": "probe_write",
                            "question": "approve probe_write?"}  # fmt: skip
        assert held["waiting_for"] == approval and held["waiting_for_all"] == [approval]
        decided = await client.post(f"/v1/approvals/{approval['approval_id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        done = await until(client, holding, "succeeded")
        assert (done["waiting_for"], done["waiting_for_all"]) == (None, [])
        shown = (await page(client))["runs"]
        assert [r["waiting_for"] for r in shown if r["id"] == holding] == [None]
        assert set(shown[0]) == {"id", "agent", "status", "channel", "created_by", "created_at", "updated_at",
                                 "attempt", "losses", "steps", "held", "waiting_for"}  # fmt: skip
        # updated_at: when the run last changed, its status or a step; never before it was made.
        ended = next(r for r in shown if r["id"] == holding)
        assert (ended["steps"], ended["attempt"]) == (1, 2)  # one step of calls, then the answer; resumed once
        assert datetime.fromisoformat(ended["updated_at"]) >= datetime.fromisoformat(held["updated_at"])
        assert datetime.fromisoformat(ended["updated_at"]) > datetime.fromisoformat(ended["created_at"])
