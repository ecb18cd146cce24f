"""`ticketiq.client` against a real app on a socket, with the stand-in model: `Client` (in a thread, the app
serving on the test's loop) and `AsyncClient`. A create whose answer is lost goes through a small real proxy
that answers 503 the first time, after passing the request on: the retry makes no second run."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support import job_kinds
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import serving
from ticketiq.cli import jobs as cli_jobs
from ticketiq.cli.client import Target
from ticketiq.client import AsyncClient, Client, Invalid, NotFound, RetryPolicy, Unreachable, models
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "a": [READ, READ, {"text": "answered {jira_key}"}],
    "asker": [
        {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]},
        {"text": "noted {jira_key}"},
    ],
    "writer": [WRITE, {"text": "wrote {jira_key}"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "a": {"tools": ["probe_read"]},
    "asker": {"tools": []},
    "writer": {"tools": ["probe_write"]},
}
# Quick retries: the proxy's 503 asks for no pause, and an unreachable port is given up soon.
QUICK = RetryPolicy(attempts=3, base_s=0.01, cap_s=0.05)


@asynccontextmanager
async def site(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[tuple[str, str, Harness]]:
    """The app's URL, an operator's token, and the harness."""
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"], **kw) as h:
        token = await h.token("ops", "operator")
        async with serving(create_app(h.settings, h.process)) as base:
            yield base, token, h


def keys_of(typed: Any) -> tuple[set[str], set[str]]:
    """A TypedDict's required keys and every key it may have."""
    return set(typed.__required_keys__), set(typed.__required_keys__) | set(typed.__optional_keys__)


def assert_shaped(answer: dict[str, Any], typed: Any) -> None:
    """The generated model names exactly the keys the API answers (entries/answers.py kept true)."""
    required, every = keys_of(typed)
    assert required <= set(answer) <= every, (typed.__name__, set(answer) ^ every)


async def test_a_run_is_created_and_waited_for_in_one_call_each_way(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, latency_ms=100) as (base, token, _h):
        async with AsyncClient(base, token) as api:
            run = await api.create("a", "check OPS-1", wait=30)
            assert run["status"] == "succeeded" and run["answer"] == "answered OPS-1"
            assert_shaped(dict(run), models.RunShown)
            made = await api.create("a", "check OPS-2")
            assert set(made) == {"id", "status"}
            ended = await api.wait(made["id"], timeout_s=30)
            assert ended["id"] == made["id"] and ended["answer"] == "answered OPS-2"

        def blocking() -> tuple[models.RunShown, models.RunShown]:
            with Client(base, token) as api:
                made = api.create("a", "check OPS-3")
                return api.wait(made["id"], timeout_s=30), api.create("a", "check OPS-4", wait=30)

        waited, created = await asyncio.to_thread(blocking)
        assert (waited["status"], waited["answer"]) == ("succeeded", "answered OPS-3")
        assert (created["status"], created["answer"]) == ("succeeded", "answered OPS-4")


async def test_a_wait_shorter_than_the_run_answers_the_run_as_it_is(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, latency_ms=1500) as (base, token, _h), AsyncClient(base, token) as api:
        made = await api.create("a", "check OPS-5")
        early = await api.wait(made["id"], timeout_s=0.5)
        assert early["status"] in ("queued", "running")
        assert (await api.wait(made["id"], timeout_s=30))["status"] == "succeeded"


async def test_a_process_holding_too_many_waits_is_asked_again_after_its_retry_after(
    db_url: str, tmp_path: Path
) -> None:
    # No wait is held at all: each is answered at once, with the run as it is and Retry-After: 1.
    async with site(db_url, tmp_path, latency_ms=300, max_waiters=0) as (base, token, _h):
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as raw:
            made = (await raw.post("/v1/runs", json={"agent": "a", "input": "check OPS-7"})).json()
            refused = await raw.get(f"/v1/runs/{made['id']}", params={"wait": 30})
            assert refused.headers["Retry-After"] == "1" and refused.json()["status"] in ("queued", "running")
        async with AsyncClient(base, token) as api:
            run = await api.wait(made["id"], timeout_s=30)
        assert (run["status"], run["answer"]) == ("succeeded", "answered OPS-7")


async def test_a_create_whose_answer_was_lost_is_sent_again_and_makes_one_run(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (base, token, _h):
        seen: list[tuple[str, str | None, int]] = []
        upstream = httpx.AsyncClient(base_url=base, timeout=60)

        async def forward(request: Request) -> Response:
            body = await request.body()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
            answer = await upstream.request(request.method, request.url.path, params=request.url.query,
                                            content=body, headers=headers)  # fmt: skip
            first = request.method == "POST" and not any(m == "POST" for m, _, _ in seen)
            seen.append((request.method, request.headers.get("idempotency-key"), answer.status_code))
            if first:
                # The run was made; its answer is lost on the way back.
                return Response(b'{"detail": "the database is unavailable; retry"}', 503, {"Retry-After": "0"},
                                media_type="application/json")  # fmt: skip
            return Response(answer.content, answer.status_code, {k: v for k, v in answer.headers.items()
                            if k.lower() in ("content-type", "idempotent-replayed", "retry-after")})  # fmt: skip

        proxy = Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])
        try:
            async with serving(proxy) as through, AsyncClient(through, token, retries=QUICK) as api:
                made = await api.create("a", "check OPS-6")
                run = await api.wait(made["id"], timeout_s=30)
        finally:
            await upstream.aclose()
        posts = [(key, status) for method, key, status in seen if method == "POST"]
        assert len(posts) == 2 and posts[0][0] == posts[1][0] and posts[0][0] is not None, posts
        assert [status for _, status in posts] == [201, 201]
        assert run["status"] == "succeeded"
        rows = await read_rows(db_url, "SELECT id FROM runs WHERE input = %s", "check OPS-6")
        assert [str(r["id"]) for r in rows] == [made["id"]]


async def test_the_list_is_read_page_after_page(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (base, token, _h), AsyncClient(base, token) as api:
        made = [(await api.create("a", f"check OPS-{10 + n}"))["id"] for n in range(5)]
        first = await api.runs_page(agent="a", limit=2)
        assert len(first["runs"]) == 2 and first["next_cursor"]
        assert_shaped(dict(first["runs"][0]), models.RunListed)
        listed = [run["id"] async for run in api.runs(agent="a", limit=2)]
        assert listed == list(reversed(made))  # newest first, each once, across three pages

        def blocking() -> list[str]:
            with Client(base, token) as sync_api:
                return [run["id"] for run in sync_api.runs(agent="a", limit=2)]

        assert await asyncio.to_thread(blocking) == listed


async def test_the_events_are_followed_to_the_end_and_not_told_twice(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, latency_ms=200) as (base, token, _h), AsyncClient(base, token) as api:
        made = await api.create("a", "check OPS-20")
        events = [event async for event in api.follow(made["id"])]
        assert events[-1].event == "end" and events[-1].data["status"] == "succeeded"
        assert "status" in {e.event for e in events}
        # Followed on from the end's id: nothing more to tell.
        assert [e async for e in api.follow(made["id"], events[-1].id)] == []

        def blocking() -> list[str]:
            with Client(base, token) as sync_api:
                return [e.event for e in sync_api.follow(made["id"])]

        told = await asyncio.to_thread(blocking)
        assert told[-1] == "end"


async def test_input_and_approvals_let_a_waiting_run_go_on(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (base, token, h), AsyncClient(base, token) as api:
        asking = await api.create("asker", "deploy OPS-30", may_wait=True, wait=30)
        assert asking["status"] == "waiting" and asking["waiting_for"] is not None
        assert_shaped(dict(asking["waiting_for"]), models.WaitingFor)
        question = asking["waiting_for"]["question_id"]
        taken = await api.give_input(asking["id"], "staging", question)
        assert taken["question_id"] == question
        assert_shaped(dict(taken), models.InputTaken)
        assert (await api.wait(asking["id"], timeout_s=30))["answer"] == "noted OPS-30"

        held = await api.create("writer", "close OPS-31", may_wait=True, wait=30)
        assert held["status"] == "waiting" and held["waiting_for"] is not None
        assert held["waiting_for"]["kind"] == "approval"
        pending = await api.approvals()
        assert [a["run_id"] for a in pending] == [held["id"]]
        assert_shaped(dict(pending[0]), models.ApprovalShown)

        def blocking() -> models.ApprovalShown:
            with Client(base, token) as sync_api:
                return sync_api.decide(pending[0]["id"], approve=True, reason="checked")

        decided = await asyncio.to_thread(blocking)
        assert (decided["status"], decided["decided_by"]) == ("approved", "ops")
        assert (await api.wait(held["id"], timeout_s=30))["answer"] == "wrote OPS-31"
        assert [w["args"]["note"] for w in h.probe.writes()] == ["OPS-31"]

        # A run stopped while it waits for a person.
        again = await api.create("asker", "deploy OPS-32", may_wait=True, wait=30)
        stopped = await api.stop(again["id"])
        assert stopped["id"] == again["id"] and stopped["stop_requested"] is True
        assert_shaped(dict(stopped), models.StopRequested)
        assert (await api.wait(again["id"], timeout_s=30))["status"] == "stopped"


async def test_the_timeline_shows_each_step_and_call(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (base, token, _h), AsyncClient(base, token) as api:
        run = await api.create("a", "check OPS-40", wait=30)
        timeline = await api.timeline(run["id"])
        assert timeline["run"]["id"] == run["id"] and len(timeline["attempts"]) == 1
        assert [[c["tool"] for c in s["calls"]] for s in timeline["steps"]] == [["probe_read"], ["probe_read"], []]
        assert_shaped(dict(timeline), models.Timeline)
        assert_shaped(dict(timeline["attempts"][0]), models.Attempt)
        assert_shaped(dict(timeline["steps"][0]), models.TimelineStep)
        assert_shaped(dict(timeline["steps"][0]["calls"][0]), models.TimelineCall)


async def test_a_refusal_carries_the_field_and_the_message(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (base, token, _h), AsyncClient(base, token) as api:
        with pytest.raises(Invalid) as bad:
            await api.create("", "check OPS-50")
        assert (bad.value.status, bad.value.field) == (422, "body.agent") and bad.value.message
        unknown = str(uuid.UUID(int=0))
        with pytest.raises(NotFound) as missing:
            await api.run(unknown)
        assert (missing.value.status, missing.value.field, missing.value.message) == (
            404, "path.run_id", f"no run {unknown}"
        )  # fmt: skip

        def blocking() -> NotFound:
            with Client(base, token) as sync_api, pytest.raises(NotFound) as caught:
                sync_api.timeline(unknown)
            return caught.value

        assert (await asyncio.to_thread(blocking)).field == "path.run_id"


async def test_an_api_that_cannot_be_reached_is_unreachable_after_the_retries() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    try:
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        async with AsyncClient(url, "tiq_none", retries=QUICK) as api:
            with pytest.raises(Unreachable, match=f"cannot reach the API at {url}"):
                await api.run(str(uuid.uuid4()))
    finally:
        closed.close()


async def test_jobs_are_read_and_the_cli_watches_one_to_its_end(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job_kinds.register(monkeypatch)
    async with site(db_url, tmp_path) as (base, token, _h):
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}) as raw:
            made = (await raw.post("/v1/jobs", json={"kind": "count", "params": {"to": 3}})).json()
        console = Console(record=True, width=200)
        target = Target(base, token, "--url", "--token")
        assert await cli_jobs.watch(target, made["id"], 0.05, console) == 0
        assert f"job {made['id']} (count) succeeded: 3 of 3 steps" in console.export_text()
        assert await cli_jobs.listed(target, None, "count", 10) == 0
        assert made["id"] in capsys.readouterr().out
        async with AsyncClient(base, token) as api:
            job = await api.job(made["id"])
            assert job["status"] == "succeeded" and job["progress"] == {"done": 3, "total": 3, "unit": "steps"}
            assert_shaped(dict(job), models.JobShown)
            assert [j["id"] for j in await api.jobs(kind="count")] == [made["id"]]
