"""The console over HTTP (issue 16, section 2): sign-in sessions, CSRF, roles, and the headers every page
carries, against a real app on a real socket and a real Postgres. The browser tests (tests/browser/)
drive the same pages in Chromium."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi.routing import APIRoute

from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.console import sessions, web
from ticketiq.entries import auth
from ticketiq.entries.api import ROUTES, create_app
from ticketiq.storage.token_store import TokenStore

WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
ASK: dict[str, Any] = {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]}
SCRIPTS = {"a": [WRITE, {"text": "wrote {jira_key}"}], "asker": [ASK, {"text": "noted {result:request_input.input}"}]}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": ["probe_write"]}, "asker": {"tools": []}}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
# What a refused POST must leave as it was.
STATE = ("SELECT (SELECT count(*) FROM audit_log) AS audit, (SELECT status FROM approvals) AS approval, "
         "(SELECT status FROM runs) AS run")  # fmt: skip


@dataclass
class Site:
    client: httpx.AsyncClient
    h: Harness
    db_url: str
    base: str

    @asynccontextmanager
    async def sign_in(self, token: str) -> AsyncIterator[httpx.AsyncClient]:
        """A client of its own (its own cookie jar) signed in with the token."""
        async with httpx.AsyncClient(verify=TLS, base_url=self.base, timeout=30) as client:
            form = await client.get("/console/login")
            done = await client.post("/console/login", data={"csrf": csrf_of(form), "token": token,
                                                             "next": "/console/runs"})  # fmt: skip
            assert done.status_code == 303 and done.headers["location"] == "/console/runs", done.text
            yield client

    async def run_waiting(self, token: str, agent: str) -> str:
        made = await self.client.post("/v1/runs", json={"agent": agent, "input": "look at OPS-9"},
                                      headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        run_id = str(made.json()["id"])
        for _ in range(600):
            got = (await self.client.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})).json()
            if got["status"] == "waiting":
                return run_id
            await _pause()
        raise AssertionError(f"run {run_id} never waited")


async def _pause() -> None:
    await asyncio.sleep(0.05)


@asynccontextmanager
async def site(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[Site]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"], **kw) as h:
        app = create_app(h.settings, h.process)
        async with serving(app) as base, httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client:
            yield Site(client, h, db_url, base)


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found is not None, page.text
    return found.group(1)


async def test_sign_in_keeps_only_a_hash_and_the_cookie_is_httponly_strict_and_expiring(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        form = await s.client.get("/console/login")
        login_csrf = csrf_of(form)
        done = await s.client.post("/console/login", data={"csrf": login_csrf, "token": token, "next": "/console/jobs"})
        assert done.status_code == 303 and done.headers["location"] == "/console/jobs"
        cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith(f"{sessions.COOKIE}="))
        session_id = cookie.split(";")[0].split("=", 1)[1]
        attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
        assert {"httponly", "max-age", "path", "samesite"} <= attributes and "secure" not in attributes
        assert "samesite=strict" in cookie.lower() and "max-age=43200" in cookie.lower()
        assert token not in cookie and session_id != token
        rows = await read_rows(
            db_url, "SELECT id_hash, token_name, expires_at - created_at AS ttl FROM console_sessions"
        )
        assert [(r["id_hash"], r["token_name"]) for r in rows] == [(hashlib.sha256(session_id.encode()).hexdigest(),
                                                                   "oncall")]  # fmt: skip
        assert rows[0]["ttl"].total_seconds() == 43200
        everything = await read_rows(db_url, "SELECT s::text AS row FROM console_sessions s")
        assert token not in everything[0]["row"] and session_id not in everything[0]["row"]
        # The token is on no page the session is shown.
        async with s.sign_in(token) as client:
            for path in ("/console/runs", "/console/approvals", "/console/jobs", "/console/processes"):
                page = await client.get(path)
                assert page.status_code == 200, (path, page.text)
                assert token not in page.text


async def test_over_https_the_cookie_is_secure(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        # uvicorn takes the scheme from X-Forwarded-Proto of a trusted proxy (loopback: the edge, which sets it).
        https = {"X-Forwarded-Proto": "https"}
        form = await s.client.get("/console/login", headers=https)
        assert "secure" in form.headers["set-cookie"].lower()  # the sign-in form's own cookie too
        # Sent back as a browser would over https (httpx keeps a Secure cookie off an http:// request).
        back = {**https, "Cookie": f"{sessions.LOGIN_COOKIE}={csrf_of(form)}"}
        done = await s.client.post("/console/login", data={"csrf": csrf_of(form), "token": token}, headers=back)
        assert done.status_code == 303, done.text
        cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith(f"{sessions.COOKIE}="))
        assert "secure" in cookie.lower()


async def test_a_wrong_token_or_a_missing_csrf_token_signs_nobody_in(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        form = await s.client.get("/console/login")
        wrong = await s.client.post("/console/login", data={"csrf": csrf_of(form), "token": "tiq_" + "x" * 43})
        assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
        assert "tiq_" + "x" * 43 not in wrong.text  # never echoed
        no_csrf = await s.client.post("/console/login", data={"token": token})
        assert no_csrf.status_code == 403
        assert await read_rows(db_url, "SELECT 1 FROM console_sessions") == []


async def test_a_post_without_its_csrf_token_is_refused_and_changes_nothing(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        run_id = await s.run_waiting(token, "a")
        approval = (await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", run_id))[0]["id"]
        async with s.sign_in(token) as client:
            before = await read_rows(db_url, STATE)
            for path, data in [(f"/console/runs/{run_id}/stop", {}),
                               (f"/console/approvals/{approval}", {"decision": "approve"}),
                               (f"/console/approvals/{approval}", {"decision": "approve",
                                                                   "csrf": sessions.new_secret()}),
                               ("/console/logout", {})]:  # fmt: skip
                refused = await client.post(path, data=data)
                assert refused.status_code == 403, (path, refused.text)
                assert "CSRF" in refused.text
            after = await read_rows(db_url, STATE)
            assert after == before
            assert len(await read_rows(db_url, "SELECT 1 FROM console_sessions")) == 1  # logout refused too
            # With its token, the same form does it.
            page = await client.get(f"/console/runs/{run_id}")
            form = {"decision": "reject", "csrf": csrf_of(page), "reason": "not now"}
            done = await client.post(f"/console/approvals/{approval}", data=form)
            assert done.status_code == 303
        decided = await read_rows(db_url, "SELECT status, decided_by, reason FROM approvals")
        assert [(d["status"], d["decided_by"], d["reason"]) for d in decided] == [("rejected", "oncall", "not now")]


async def test_a_session_lends_reads_of_runs_only_and_never_a_write(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        run_id = await s.run_waiting(token, "asker")
        async with s.sign_in(token) as client:
            listed = await client.get("/v1/runs")
            assert [r["status"] for r in listed.json()["runs"] if r["id"] == run_id] == ["waiting"]
            # The run page's live updates: its events, as the script's EventSource reads them.
            async with client.stream("GET", f"/v1/runs/{run_id}/events") as events:
                assert events.status_code == 200
                assert events.headers["content-type"].startswith("text/event-stream")
                first = await anext(events.aiter_lines())
                assert first.startswith("event: ")
            # Anything else of the API, and any write, needs the token itself: a run's own reads included.
            for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/transcript", f"/v1/runs/{run_id}/timeline"):
                assert (await client.get(path)).status_code == 401, path
            assert (await client.post("/v1/runs", json={"agent": "a", "input": "x"})).status_code == 401
            assert (await client.post(f"/v1/runs/{run_id}/stop", json={})).status_code == 401
            assert (await client.get("/v1/approvals")).status_code == 401
            assert (await client.get("/v1/tokens")).status_code == 401
        assert len(await read_rows(db_url, "SELECT 1 FROM runs")) == 1


async def test_revoking_the_token_or_expiry_or_sign_out_ends_the_session(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        async with s.sign_in(token) as client:
            assert (await client.get("/console/runs")).status_code == 200
            assert await TokenStore(s.h.process.db).revoke("oncall", "admin") is not None
            gone = await client.get("/console/runs?status=waiting")
            assert gone.status_code == 303
            assert gone.headers["location"] == "/console/login?next=/console/runs%3Fstatus%3Dwaiting"
            assert (await client.get("/v1/runs")).status_code == 401
        other = await s.h.token("dayshift", "operator")
        async with s.sign_in(other) as client:
            await read_rows(db_url, "UPDATE console_sessions SET expires_at = now() - interval '1 s', "
                                    "created_at = now() - interval '1 h' WHERE token_name = 'dayshift'")  # fmt: skip
            assert (await client.get("/console/runs")).status_code == 303
        async with s.sign_in(other) as client:
            page = await client.get("/console/runs")
            out = await client.post("/console/logout", data={"csrf": csrf_of(page)})
            assert out.status_code == 303 and out.headers["location"].startswith("/console/login")
            assert (
                f'{sessions.COOKIE}=""' in out.headers["set-cookie"] or "max-age=0" in out.headers["set-cookie"].lower()
            )
        # The signed-out and the expired sessions are gone (the next sign-in purged the expired one).
        assert [r["token_name"] for r in await read_rows(db_url, "SELECT token_name FROM console_sessions")] == []
        audit = await read_rows(
            db_url, "SELECT action, actor FROM audit_log WHERE action LIKE 'console.%%' ORDER BY id"
        )
        assert [(a["action"], a["actor"]) for a in audit][-2:] == [("console.signed_in", "dayshift"),
                                                                     ("console.signed_out", "dayshift")]  # fmt: skip


async def test_roles_apply_as_on_the_api(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        operator = await s.h.token("oncall", "operator")
        caller = await s.h.token("alice", "caller")
        theirs = await s.run_waiting(operator, "a")
        approval = (await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", theirs))[0]["id"]
        async with s.sign_in(caller) as client:
            assert (await client.get(f"/console/runs/{theirs}")).status_code == 404
            assert theirs not in (await client.get("/v1/runs")).text  # the list the session reads
            for path in ("/console/approvals", "/console/jobs", "/console/processes", "/console/teams"):
                assert (await client.get(path)).status_code == 403, path
            page = await client.get("/console/runs")
            assert theirs not in page.text
            denied = await client.post(f"/console/approvals/{approval}", data={"decision": "approve",
                                                                               "csrf": csrf_of(page)})  # fmt: skip
            assert denied.status_code == 403 and "read and decide approvals" in denied.text
            stop = await client.post(f"/console/runs/{theirs}/stop", data={"csrf": csrf_of(page)})
            assert stop.status_code == 403
        assert (await read_rows(db_url, "SELECT status FROM approvals"))[0]["status"] == "pending"


async def test_every_console_response_forbids_inline_script_and_framing(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "operator")
        async with s.sign_in(token) as client:
            signed = ["/console/runs", f"/console/runs/{'0' * 8}", "/console/static/console.js", "/console/nothing"]
            answers = [await s.client.get("/console/login"), await s.client.get("/console/runs")]
            answers += [await client.get(path) for path in signed]
            for answer in answers:
                csp = answer.headers["content-security-policy"]
                assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
                assert answer.headers["x-content-type-options"] == "nosniff"
                assert answer.headers["referrer-policy"] == web.HEADERS["Referrer-Policy"]
            page = answers[2].text  # a signed-in page
            assert "<script>" not in page and '<script src="/console/static/console.js" defer></script>' in page
            assert re.search(r"\son[a-z]+\s*=", page) is None  # no inline handler


def documented_session_reads() -> set[str]:
    """The routes docs/operate.md says a session cookie opens ("The console"), each `{name}` as `{}`."""
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "operate.md").read_text().split())
    start = text.index("The session also authenticates")
    said = text[start : text.index("HEAD only", start)]
    return {re.sub(r"{\w+}", "{}", path) for path in re.findall(r"`GET (/v1/[^`]+)`", said)}


async def test_the_routes_a_session_opens_are_the_ones_the_docs_list(db_url: str, tmp_path: Path) -> None:
    """Every GET route of the app, asked for with a session cookie and no token: those that answer are
    exactly the list of docs/operate.md (finding 5 of issue 32: the code opened a run, its transcript and timeline
    too)."""
    routes = [r for r in ROUTES.routes if isinstance(r, APIRoute)]
    gets = sorted({r.path for r in routes if "GET" in (r.methods or ()) and r.path.startswith("/v1/")})
    assert {"/v1/runs", "/v1/runs/{run_id}", "/v1/runs/{run_id}/events", "/v1/approvals"} <= set(gets)
    documented = documented_session_reads()
    assert documented == {"/v1/runs", "/v1/runs/{}/events"}, documented
    async with site(db_url, tmp_path) as s:
        token = await s.h.token("oncall", "admin")
        run_id = await s.run_waiting(token, "asker")
        opened = set()
        async with s.sign_in(token) as client:
            for template in gets:
                path = re.sub(r"{\w+}", run_id, template)
                async with client.stream("GET", path) as answer:  # an event stream is left at its headers
                    if answer.status_code != 401:
                        opened.add(re.sub(r"{\w+}", "{}", template))
        assert opened == documented
        assert {re.sub(r"{\w+}", "{}", t) for t in auth.SESSION_READS} == documented
