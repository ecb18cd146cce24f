"""`GET /v1/runs/{id}?wait=S` (issue 35): one request waits for the run to end or to wait for a person."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import httpx

from tests.support.engine import Harness, engine_under_test
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "a": [READ, READ, {"text": "answered {jira_key}"}],
    "asker": [
        {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]},
        {"text": "noted {jira_key}"},
    ],
}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": ["probe_read"]}, "asker": {"tools": []}}


@asynccontextmanager
async def site(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Any, Harness]]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, **kw) as h:
        token = await h.token("ops", "operator")
        app = create_app(h.settings, h.process)
        async with (
            serving(app) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,  # fmt: skip
        ):
            yield client, app, h


async def start(client: httpx.AsyncClient, agent: str, text: str) -> str:
    made = await client.post("/v1/runs", json={"agent": agent, "input": text, "may_wait": True})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def test_one_request_answers_when_the_run_ends_or_waits_for_a_person(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, latency_ms=300) as (client, _, h):
        run_id = await start(client, "a", "check OPS-1")
        asked = len(h.asked)
        ended = await client.get(f"/v1/runs/{run_id}", params={"wait": 20})
        assert ended.status_code == 200 and ended.json()["status"] == "succeeded"
        assert ended.json()["answer"] == "answered OPS-1" and len(h.asked) > asked
        # Ended already: at once.
        began = time.monotonic()
        assert (await client.get(f"/v1/runs/{run_id}", params={"wait": 60})).json()["status"] == "succeeded"
        assert time.monotonic() - began < 5  # a bound on a wait, not a speed figure
        asking = await start(client, "asker", "deploy OPS-2")
        waits = await client.get(f"/v1/runs/{asking}", params={"wait": 20})
        assert waits.json()["status"] == "waiting" and waits.json()["waiting_for"]["question_id"]


async def test_a_wait_that_is_not_a_number_from_0_to_60_is_422_naming_wait(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, _, _h):
        run_id = await start(client, "a", "check OPS-3")
        for bad in ("61", "-1", "soon", "nan"):
            refused = await client.get(f"/v1/runs/{run_id}", params={"wait": bad})
            assert refused.status_code == 422, (bad, refused.text)
            assert refused.json()["detail"][0]["loc"] == ["query", "wait"], bad
        unknown = await client.get("/v1/runs/00000000-0000-0000-0000-000000000000", params={"wait": 1})
        assert unknown.status_code == 404


async def test_past_the_waiters_limit_a_wait_is_answered_at_once_and_a_client_that_leaves_frees_its_waiter(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, latency_ms=2000, max_waiters=1) as (client, app, _h):
        run_id = await start(client, "a", "check OPS-4")
        first = asyncio.create_task(client.get(f"/v1/runs/{run_id}", params={"wait": 30}))
        for _ in range(100):
            if app.state.waiters.held == 1:
                break
            await asyncio.sleep(0.05)
        assert app.state.waiters.held == 1
        second = await client.get(f"/v1/runs/{run_id}", params={"wait": 30})
        assert second.status_code == 200 and second.headers["Retry-After"] == "1"
        assert second.json()["status"] in ("queued", "running")
        # The first client hangs up: its waiter is freed, though the run goes on.
        first.cancel()
        with suppress(asyncio.CancelledError):
            await first
        for _ in range(100):
            if app.state.waiters.held == 0:
                break
            await asyncio.sleep(0.05)
        assert app.state.waiters.held == 0
        assert (await client.get(f"/v1/runs/{run_id}")).json()["status"] in ("queued", "running")


async def test_a_post_with_wait_answers_201_with_the_run_as_it_is_then(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, latency_ms=100) as (client, _, _h):
        made = await client.post("/v1/runs", params={"wait": 20}, json={"agent": "a", "input": "check OPS-5"},
                                 headers={"Idempotency-Key": "w-1"})  # fmt: skip
        assert made.status_code == 201, made.text
        assert made.json()["status"] == "succeeded" and made.json()["answer"] == "answered OPS-5"
        again = await client.post("/v1/runs", params={"wait": 20}, json={"agent": "a", "input": "check OPS-5"},
                                  headers={"Idempotency-Key": "w-1"})  # fmt: skip
        assert again.json()["id"] == made.json()["id"] and again.headers.get("Idempotent-Replayed") == "true"
        refused = await client.post("/v1/runs", params={"wait": 99}, json={"agent": "a", "input": "check OPS-6"})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "wait"]
        plain = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-7"})
        assert set(plain.json()) == {"id", "status"}  # without `wait`, as before


async def test_one_token_waits_for_more_runs_at_once_than_its_event_streams_cap(db_url: str, tmp_path: Path) -> None:
    # A client keeping runs in flight waits for each: the streams' cap (2 here) is not a wait's.
    async with site(db_url, tmp_path, latency_ms=500, max_streams_per_principal=2) as (client, _, _h):
        runs = [await start(client, "a", f"check OPS-{10 + i}") for i in range(4)]
        answers = await asyncio.gather(*(client.get(f"/v1/runs/{r}", params={"wait": 30}) for r in runs))
        assert [a.json()["status"] for a in answers] == ["succeeded"] * 4
        assert not any("retry-after" in a.headers for a in answers)
