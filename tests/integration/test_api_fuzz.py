"""I16 and bad input: every route, driven with arbitrary Unicode and JSON, answers without a 5xx, and a
refused request writes nothing. The app and its engine serve from a thread of their own (real sockets,
real Postgres); Hypothesis drives them with a plain HTTP client."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.engine import engine_under_test
from tests.support.http import TLS, serving
from ticketiq.entries.api import ROUTES, create_app

# Every table a request can write. Leases and processes are the processes' own, renewed in the background.
TABLES = (
    "runs", "checkpoints", "calls", "transcripts", "approvals", "audit_log", "quarantines", "channels",
    "principals", "grants", "tool_policies", "api_tokens", "answers", "inputs", "a2a_tasks", "idempotency_keys",
    "triggers", "trigger_secrets", "trigger_deliveries", "ticket_events", "schedules", "schedule_fires",
    "teams_inbox",
)  # fmt: skip
DIGEST = " UNION ALL ".join(
    f"SELECT '{t}' AS t, count(*) AS n, md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) AS h FROM {t} x"
    for t in TABLES
)

# Any code point: NUL, unpaired surrogates, private use, everything.
any_text = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
# What a URL can carry (a lone surrogate has no UTF-8 to percent-encode); NUL included.
url_text = st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=20,
)
FIELDS = ("agent", "input", "may_wait", "decision", "reason", "enabled", "granted", "may_run", "needs_approval",
          "name", "role", "agents", "secret", "expire_others_in_s", "webhookEvent", "issue", "cron",
          "timezone")  # fmt: skip
near_valid = st.dictionaries(st.sampled_from(FIELDS), json_values | st.sampled_from(["a", "approve", "caller"]))
QUERY = ("after", "limit", "status", "run_id", "action")


@dataclass
class Served:
    base: str
    token: str
    db_url: str
    routes: list[tuple[str, str]]  # (method, path template)
    # Kept for every example: a connection and a client a check made afresh cost a server backend and
    # certifi's roots read again, several times the request they judge.
    conn: psycopg.Connection[tuple[Any, ...]]
    client: httpx.Client


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[Served]:
    """The API over a real engine, in a thread of its own with its own event loop."""
    ready = threading.Event()
    stop = threading.Event()
    found: dict[str, Any] = {}

    async def main() -> None:
        scripts = {"a": [{"text": "done"}]}
        async with engine_under_test(db_url, tmp_path, scripts, {"a": {"tools": ["probe_read"]}}, lead=False) as h:
            app = create_app(h.settings, h.process)
            async with serving(app) as base:
                found.update(base=base, token=await h.token("fuzzer", "admin"))
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test, not lost in the thread
            found["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="fuzzed-api")
    thread.start()
    try:
        assert ready.wait(60) and "error" not in found, found.get("error")
        routes = [
            (method, route.path)
            for route in ROUTES.routes  # every app's: create_app includes them
            if isinstance(route, APIRoute)
            for method in sorted(route.methods or ())
        ]
        with (
            psycopg.connect(db_url, autocommit=True) as conn,
            httpx.Client(verify=TLS, base_url=found["base"], timeout=30) as client,
        ):
            yield Served(found["base"], found["token"], db_url, routes, conn, client)
    finally:
        stop.set()
        thread.join(60)


def digest(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return list(conn.execute(DIGEST).fetchall())


def fill(template: str, values: list[str]) -> str:
    names = re.findall(r"{(\w+)}", template)
    out = template
    for name, value in zip(names, values, strict=False):
        out = out.replace("{" + name + "}", urllib.parse.quote(value, safe="") or "x", 1)
    return out


def quiet(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Wait until no run an earlier request started is still being driven: only then does a change of
    the tables say what the next request wrote."""
    deadline = time.monotonic() + 30
    while conn.execute("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')").fetchone() != (0,):
        assert time.monotonic() < deadline, "runs never ended"
        time.sleep(0.02)


def check(served: Served, method: str, path: str, query: dict[str, str], body: bytes | None) -> httpx.Response:
    quiet(served.conn)
    before = digest(served.conn)
    headers = {"Authorization": f"Bearer {served.token}", "content-type": "application/json"}
    response = served.client.request(method, path, params=query, content=body, headers=headers)
    assert response.status_code < 500, (method, path, query, body, response.status_code, response.text)
    if response.status_code >= 400:
        assert digest(served.conn) == before, (method, path, response.status_code)  # nothing written
    return response


@pytest.mark.long
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    values=st.lists(url_text | st.uuids().map(str), min_size=2, max_size=2),
    query=st.dictionaries(st.sampled_from(QUERY) | url_text, url_text | st.integers().map(str), max_size=3),
    body=st.one_of(st.none(), json_values, near_valid),
)
def test_every_route_answers_arbitrary_input_without_a_5xx_and_a_refusal_writes_nothing(
    served: Served, data: st.DataObject, values: list[str], query: dict[str, str], body: Any
) -> None:
    method, template = data.draw(st.sampled_from(served.routes))
    raw = None if body is None else json.dumps(body, ensure_ascii=True).encode()
    check(served, method, fill(template, values), query, raw)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# A lone surrogate stays lone between separators (a high one before a low one would pair into a character).
@given(
    text=st.tuples(any_text, st.sampled_from(["\x00", "\ud800", "\udbff", "\udc00", "\udfff"]), any_text).map("|".join)
)
def test_a_run_input_that_cannot_be_stored_is_refused_naming_the_field(served: Served, text: str) -> None:
    raw = json.dumps({"agent": "a", "input": f"look at OPS-1 {text}"}, ensure_ascii=True).encode()
    response = check(served, "POST", "/v1/runs", {}, raw)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "input"]


def test_a_nul_in_a_path_or_query_is_refused_naming_where(served: Served) -> None:
    for method, path, query, where in (
        ("PUT", "/v1/gates/quarantines/agent/bad%00name", {}, ["path"]),
        ("GET", "/v1/audit", {"action": "x\x00y"}, ["query", "action"]),
    ):
        body = json.dumps({"reason": "r"}).encode() if method == "PUT" else None
        response = check(served, method, path, query, body)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == where


def test_a_body_larger_than_the_api_takes_is_refused(served: Served) -> None:
    huge = json.dumps({"agent": "a", "input": "x" * (2 << 20)}).encode()
    assert check(served, "POST", "/v1/runs", {}, huge).status_code == 413


def test_the_fuzzer_reaches_every_route(served: Served) -> None:
    paths = {path for _, path in served.routes}
    assert {"/v1/runs", "/v1/runs/{run_id}", "/v1/approvals/{approval_id}", "/v1/gates/policies/{tool}",
            "/v1/tokens/{name}", "/healthz", "/v1/hooks/{name}", "/v1/ticket-events",
            "/v1/schedules/{schedule_id}/fires", "/v1/teams/messages", "/v1/teams/inbox"} <= paths  # fmt: skip


def test_json_nested_deeper_than_the_limit_is_refused_on_every_route_before_any_check(served: Served) -> None:
    # Before any route, token or signature check sees it: the signed entry points (webhooks, ticket
    # events, Teams) included. Deep enough to exhaust Python's recursion, and just past the limit.
    run_id = "00000000-0000-0000-0000-000000000001"
    for depth in (65, 100_000):
        body = b'{"input": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"
        for method, template in served.routes:
            response = check(served, method, fill(template, [run_id, run_id]), {}, body)
            if template == "/a2a":  # JSON-RPC's own error shape (tests/integration/test_a2a.py)
                assert (response.status_code, response.json()["error"]["code"]) == (200, -32700), response.text
                continue
            assert response.status_code == 422, (method, template, depth, response.status_code, response.text)
            detail = response.json()["detail"][0]
            assert detail["loc"] == ["body"] and "nested deeper than 64 levels" in detail["msg"], detail


def test_json_at_the_limit_and_brackets_inside_strings_pass_the_guard(served: Served) -> None:
    at_limit = json.dumps({"agent": "a", "input": "check OPS-1", "extra": json.loads("[" * 63 + "]" * 63)})
    refused = check(served, "POST", "/v1/runs", {}, at_limit.encode())
    assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "extra"], refused.text
    brackets = json.dumps({"agent": "a", "input": "check OPS-1 " + "[{" * 5000 + '\\"' + "}]" * 5000})
    assert check(served, "POST", "/v1/runs", {}, brackets.encode()).status_code == 201
