"""The console's operator pages over HTTP, against a real app on a real socket and a real Postgres: a
caller is refused each exactly as the API refuses it, the approvals queue reads who asked in the same
statement as the requests, and a console request that fails gets the console's page with its headers.
The pages with their rows and actions are driven in Chromium by tests/browser/test_console_pages.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

from tests.integration.test_console import AGENTS, SCRIPTS, Site, csrf_of, site
from tests.support import job_kinds
from tests.support.engine import engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.run_statements import statements_run
from ticketiq.console import web
from ticketiq.entries.api import create_app

# A read statement about requests or runs, as pg_stat_statements keeps it (parameters as $n).
_READS_RUNS_OR_APPROVALS = re.compile(r"^\s*(--[^\n]*\n\s*)*(SELECT|WITH)\b.*\b(FROM|JOIN)\s+(approvals|runs)\b",
                                      re.IGNORECASE | re.DOTALL)  # fmt: skip


async def _reads(db_url: str) -> dict[str, int]:
    """The statements reading requests or runs this test's database ran since the reset, with their calls."""
    return {q: n for q, n in (await statements_run(db_url)).items() if _READS_RUNS_OR_APPROVALS.search(q)}


@asynccontextmanager
async def site_and_app(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[tuple[Site, FastAPI]]:
    """`test_console.site`, with the app, to add a route that fails to it."""
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"], **kw) as h:
        app = create_app(h.settings, h.process)
        async with serving(app) as base, httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client:
            yield Site(client, h, db_url, base), app


async def test_a_caller_is_refused_the_operator_pages_exactly_as_the_api_refuses_it(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_kinds.register(monkeypatch)
    async with site(db_url, tmp_path, job_concurrency=0) as s:
        caller = await s.h.token("alice", "caller")
        job = await s.h.process.jobs.queue.submit("count", {"to": 3}, "ops")
        pairs = [
            ("GET", "/console/approvals", "/v1/approvals"),
            ("GET", "/console/jobs", "/v1/jobs"),
            ("POST", f"/console/jobs/{job.id}/cancel", f"/v1/jobs/{job.id}/cancel"),
            ("POST", f"/console/jobs/{job.id}/restart", f"/v1/jobs/{job.id}/restart"),
            ("GET", "/console/schedules", "/v1/schedules"),
            ("GET", "/console/teams", "/v1/teams/inbox"),
            ("GET", "/console/processes", "/v1/processes"),
        ]
        async with s.sign_in(caller) as client:
            csrf = csrf_of(await client.get("/console/runs"))
            for method, page, api in pairs:
                shown = await (client.get(page) if method == "GET" else client.post(page, data={"csrf": csrf}))
                answered = await s.client.request(method, api, headers={"Authorization": f"Bearer {caller}"})
                assert (shown.status_code, answered.status_code) == (403, 403), (page, shown.text, answered.text)
                message = answered.json()["detail"][0]["msg"]
                assert "caller" in message and message in shown.text, (page, message, shown.text)
                assert shown.headers["content-security-policy"] == web.HEADERS["Content-Security-Policy"]
        # Nothing was cancelled or restarted.
        rows = await read_rows(db_url, "SELECT status, cancel_requested_at FROM jobs")
        assert [(r["status"], r["cancel_requested_at"]) for r in rows] == [("queued", None)]


async def test_the_approvals_queue_reads_who_asked_in_the_same_statement_as_the_requests(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, lead=False) as s:
        tokens = {name: await s.h.token(name, "operator") for name in ("ana", "ben", "cleo")}
        runs = {name: await s.run_waiting(token, "a") for name, token in tokens.items()}
        async with s.sign_in(tokens["ana"]) as client:
            await read_rows(db_url, "SELECT pg_stat_statements_reset()")
            page = await client.get("/console/approvals")
            reads = await _reads(db_url)
        assert page.status_code == 200, page.text
        for name, run_id in runs.items():
            row = re.search(rf'<tr data-approval="[^"]+">(?:(?!</tr>).)*/console/runs/{run_id}(?:(?!</tr>).)*</tr>',
                            page.text, re.DOTALL)  # fmt: skip
            assert row is not None, (run_id, page.text)
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.DOTALL)
            assert cells[4:6] == ["a", name], cells  # the run's agent, and who asked: the token that started it
        # Three requests of three runs: one statement read them all with their runs, and no run was read
        # on its own.
        assert list(reads.values()) == [1], reads
        assert "approvals" in next(iter(reads)) and "JOIN runs" in next(iter(reads)), reads


async def test_a_console_request_that_fails_gets_the_console_s_page_with_its_headers(
    db_url: str, tmp_path: Path
) -> None:
    async with site_and_app(db_url, tmp_path, db_statement_timeout_s=0.5) as (s, app):
        token = await s.h.token("oncall", "operator")

        @app.get("/console/broken", include_in_schema=False)
        async def broken() -> None:
            raise RuntimeError("secret-looking detail sk-123")

        @app.get("/v1/broken", include_in_schema=False)
        async def broken_api() -> None:
            raise RuntimeError("an API route's failure")

        async with s.sign_in(token) as client:
            failed = await client.get("/console/broken")
            missing = await client.get("/console/nothing/here")
            # The database does not answer in time: the approvals are locked by another transaction.
            with psycopg.connect(db_url) as locker:
                locker.execute("LOCK TABLE approvals IN ACCESS EXCLUSIVE MODE")
                unavailable = await client.get("/console/approvals")
                locker.rollback()
        bearer = {"Authorization": f"Bearer {token}"}
        api = await s.client.get("/v1/broken", headers=bearer)
        api_storage = await s.client.get("/v1/approvals", headers=bearer)
        for answer, status, heading in ((failed, 500, "Failed"), (missing, 404, "Not found"),
                                        (unavailable, 503, "Failed")):  # fmt: skip
            assert answer.status_code == status, answer.text
            assert answer.headers["content-type"].startswith("text/html")
            for name, value in web.HEADERS.items():
                assert answer.headers[name] == value, (status, name)
            assert f"<h1>{heading}</h1>" in answer.text and 'href="/console/runs"' in answer.text
        assert "sk-123" not in failed.text and "RuntimeError" not in failed.text
        assert unavailable.headers["retry-after"] == "1" and "database is unavailable" in unavailable.text
        # Anything else is answered as before: Starlette's plain 500, the API's JSON.
        assert (api.status_code, api.text, api.headers["content-type"]) == (
            500, "Internal Server Error", "text/plain; charset=utf-8"
        )  # fmt: skip
        assert "content-security-policy" not in api.headers
        assert api_storage.status_code == 200 and "approvals" in api_storage.json()


async def test_a_runs_page_shows_its_trace_id_and_links_it_through_the_trace_url_template(
    db_url: str, tmp_path: Path
) -> None:
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with site(db_url, tmp_path, trace_url="https://traces.example/trace/{trace_id}?from=ticketiq") as s:
        token = await s.h.token("ops", "operator")
        made = await s.client.post("/v1/runs", json={"agent": "asker", "input": "look at OPS-7"},
                                   headers={"Authorization": f"Bearer {token}",
                                            "traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"})  # fmt: skip
        plain = await s.client.post("/v1/runs", json={"agent": "asker", "input": "look at OPS-8"},
                                    headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        async with s.sign_in(token) as client:
            page = (await client.get(f"/console/runs/{made.json()['id']}")).text
            assert f'href="https://traces.example/trace/{caller_trace}?from=ticketiq"' in page
            own = plain.json()["id"].replace("-", "")  # no traceparent: the run is its own trace, named by its id
            assert f">{own}</a>" in (await client.get(f"/console/runs/{plain.json()['id']}")).text
