"""`GET /v1/runs/{id}` (and `?wait=S`) answered before FastAPI routes it (`entries/run_reads.py`): the same
answer as the route's, for every request it answers, and every other request handed on to the route
untouched."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.api import until
from tests.support.engine import Harness, engine_under_test
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.entries.auth import BearerAuth
from ticketiq.entries.run_reads import RunReads, read_asked
from ticketiq.entries.run_wait import Waiters
from ticketiq.storage.token_store import TokenStore

ASK: dict[str, Any] = {
    "calls": [{"tool": "request_input", "arguments": {"question": "Which environment for {jira_key}?"}}]
}
READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "asker": [ASK, {"text": "noted {jira_key} for {result:request_input.input|no input}"}],
    "helper": [READ, {"text": "answered {jira_key}"}],
}
AGENTS: dict[str, dict[str, Any]] = {"asker": {"tools": ["probe_read"]}, "helper": {"tools": ["probe_read"]}}
ROUTE_SAYS = "the route answered"


@asynccontextmanager
async def engine(db_url: str, tmp: Path) -> AsyncIterator[tuple[Harness, dict[str, str]]]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS) as h:
        auth = {name: f"Bearer {await h.token(name, role)}" for name, role in (("ops", "admin"), ("bo", "caller"))}
        yield h, auth


async def started(client: httpx.AsyncClient, agent: str, status: str) -> str:
    made = await client.post("/v1/runs", json={"agent": agent, "input": "check OPS-7"})
    assert made.status_code == 201, made.text
    run_id = str(made.json()["id"])
    await until(client, run_id, status)
    return run_id


async def test_a_plain_read_answers_what_the_route_answers(db_url: str, tmp_path: Path) -> None:
    async with (
        engine(db_url, tmp_path) as (h, auth),
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers={"Authorization": auth["ops"]}) as ops,
    ):
        waiting = await started(ops, "asker", "waiting")
        ended = await started(ops, "helper", "succeeded")
        for run_id in (waiting, ended):
            plain = await ops.get(f"/v1/runs/{run_id}")
            waited = await ops.get(f"/v1/runs/{run_id}?wait=2.5")  # it waits for a person, or ended: at once
            # The route's own answers: an id it parses but this does not take (upper case), a wait in a form
            # only pydantic reads.
            routed = [await ops.get(f"/v1/runs/{run_id.upper()}"), await ops.get(f"/v1/runs/{run_id}?wait=25e-1")]
            assert plain.status_code == 200
            assert [(r.status_code, r.headers["content-type"], r.content) for r in [waited, *routed]] == [
                (200, plain.headers["content-type"], plain.content)
            ] * 3
        shown = (await ops.get(f"/v1/runs/{waiting}")).json()
        assert shown["status"] == "waiting" and shown["waiting_for"]["question"].startswith("Which environment")

        # Another's run and an unknown one are not found, as the route says it; no token, no answer.
        async with httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": auth["bo"]}
        ) as bo:
            theirs = await bo.get(f"/v1/runs/{ended}")
        assert theirs.status_code == 404 and theirs.json()["detail"][0]["loc"] == ["path", "run_id"]
        gone = uuid.uuid4()
        unknown = [await ops.get(f"/v1/runs/{gone}"), await ops.get(f"/v1/runs/{gone}?wait=1")]
        routed_unknown = await ops.get(f"/v1/runs/{str(gone).upper()}")
        assert [(r.status_code, r.json()) for r in unknown] == [(404, routed_unknown.json())] * 2
        assert routed_unknown.json()["detail"] == [{"loc": ["path", "run_id"], "msg": f"no run {gone}"}]
        async with httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as nobody:
            assert (await nobody.get(f"/v1/runs/{ended}")).status_code == 401


async def test_only_a_read_of_a_run_with_at_most_a_plain_wait_is_answered_the_rest_go_on_to_the_route(
    db_url: str, tmp_path: Path
) -> None:
    async def route(request: Request) -> PlainTextResponse:
        return PlainTextResponse(ROUTE_SAYS, status_code=418)

    async with engine(db_url, tmp_path) as (h, auth):
        # The middleware in front of a route of our own, which says when a request reached it.
        bare = Starlette(
            routes=[Route("/{path:path}", route, methods=["GET", "POST"])],
            middleware=[
                Middleware(BearerAuth, store=lambda scope: TokenStore(h.process.db)),
                Middleware(RunReads),
            ],
        )
        bare.state.process, bare.state.waiters = h.process, Waiters(h.settings.max_waiters)  # as the app's
        async with (
            serving(create_app(h.settings, h.process)) as api_base,
            httpx.AsyncClient(verify=TLS, base_url=api_base, timeout=30, headers={"Authorization": auth["ops"]}) as api,
            serving(bare) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers={"Authorization": auth["ops"]}) as ops,
        ):
            run_id = await started(api, "helper", "succeeded")
            gone = uuid.uuid4()
            answered = [
                await ops.get(f"/v1/runs/{run_id}"),
                await ops.get(f"/v1/runs/{run_id}?wait=1"),
                await ops.get(f"/v1/runs/{run_id}?wait=60"),
                await ops.get(f"/v1/runs/{gone}"),  # not found, said here as the route says it
                await ops.get(f"/v1/runs/{run_id}", headers={"Authorization": auth["bo"]}),  # not bo's run
            ]
            shown = (await api.get(f"/v1/runs/{run_id}")).json()
            missing = [{"loc": ["path", "run_id"], "msg": f"no run {gone}"}]
            mine = [{"loc": ["path", "run_id"], "msg": f"no run {run_id}"}]
            assert [(r.status_code, r.json()) for r in answered] == [
                (200, shown), (200, shown), (200, shown), (404, {"detail": missing}), (404, {"detail": mine})
            ]  # fmt: skip
            handed_on = [
                await ops.get(f"/v1/runs/{run_id}?verbose"),
                await ops.get(f"/v1/runs/{run_id}?wait=1&verbose"),
                await ops.get(f"/v1/runs/{run_id}?wait=61"),
                await ops.get(f"/v1/runs/{run_id}?wait=1e0"),
                await ops.get(f"/v1/runs/{run_id}?wait=-1"),
                await ops.get(f"/v1/runs/{run_id.upper()}"),
                await ops.get(f"/v1/runs/{run_id.replace('-', '')}"),
                await ops.get(f"/v1/runs/{run_id}/timeline"),
                await ops.post(f"/v1/runs/{run_id}"),
            ]
            assert [(r.status_code, r.text) for r in handed_on] == [(418, ROUTE_SAYS)] * len(handed_on)
            assert (await ops.get(f"/v1/runs/{run_id}", headers={"Authorization": "Bearer nope"})).status_code == 401


ID = "0b7c6f5e-2a4d-4c1e-9d3b-5f6a7b8c9d0e"


@pytest.mark.parametrize(
    ("path", "query", "asked"),
    [
        (f"/v1/runs/{ID}", b"", (ID, 0.0)),
        (f"/v1/runs/{ID}", b"wait=5", (ID, 5.0)),
        (f"/v1/runs/{ID}", b"wait=0", (ID, 0.0)),
        (f"/v1/runs/{ID}", b"wait=60", (ID, 60.0)),
        (f"/v1/runs/{ID}", b"wait=2.25", (ID, 2.25)),
        (f"/v1/runs/{ID}", b"wait=60.5", None),
        (f"/v1/runs/{ID}", b"wait=99", None),
        (f"/v1/runs/{ID}", b"wait=100", None),
        (f"/v1/runs/{ID}", b"wait=", None),
        (f"/v1/runs/{ID}", b"wait=5&wait=6", None),
        (f"/v1/runs/{ID}", b"wait=5.", None),
        (f"/v1/runs/{ID}", b"verbose", None),
        (f"/v1/runs/{ID.upper()}", b"", None),
        (f"/v1/runs/{ID.replace('-', '')}", b"", None),
        (f"/v1/runs/{{{ID[:-2]}}}", b"", None),
        (f"/v1/runs/{ID[:-1]}z", b"", None),
        (f"/v1/runx/{ID}", b"", None),
        (f"/v1/runs/{ID}/", b"", None),
        ("/v1/runs/", b"", None),
    ],
)
def test_a_read_asked_is_a_canonical_id_and_at_most_a_plain_wait(
    path: str, query: bytes, asked: tuple[str, float] | None
) -> None:
    assert read_asked(path, query) == asked
