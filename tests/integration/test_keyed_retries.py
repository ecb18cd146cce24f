"""A creating POST sent again after a crash finds what the first one made (I19, issue 15), over a real
socket and a real Postgres.

The crash is the one that matters: the first request's process made the thing (its row committed) and
died before it kept the key's answer. `answer_lost` leaves the key as that leaves it: claimed for the
same request by a process whose liveness mark is free, so the retry takes the key over and answers the
request again, and must find the first request's thing instead of making a second (or refusing it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import job_kinds
from tests.support.api import waiting_approval
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"a": [READ, WRITE, {"text": "answered {jira_key}"}]}
AGENTS = {"a": {"tools": ["probe_read", "probe_write"]}}
KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
SCHEDULE = {"agent": "a", "cron": "0 9 * * *", "timezone": "Europe/Berlin", "input": "Look at OPS-1"}
KEYED_WRITE = {"tool": "probe_keyed", "args": {"note": "by hand"}}


@pytest.fixture(autouse=True)
def test_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    job_kinds.register(monkeypatch)


@asynccontextmanager
async def site(db_url: str, tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    # Agent a's writes wait for a person (its runs file approvals); no job worker runs (jobs stay queued);
    # no leader fires schedules.
    async with (
        engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"], job_concurrency=0, lead=False) as h,
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
    ):
        yield client, h


async def as_(h: Harness, name: str, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await h.token(name, role)}"}


async def answer_lost(db_url: str, key: str, scope: str | None = None) -> None:
    """The key as a process killed between making its thing and keeping the key's answer leaves it."""
    lost = await read_rows(
        db_url,
        "UPDATE idempotency_keys SET state = 'working', status_code = NULL, response = NULL, answered_at = NULL, "
        "holder = 'dead-process', expires_at = now() + interval '60 s' "
        "WHERE key = %s AND (%s::text IS NULL OR scope = %s) RETURNING key",
        key,
        scope,
        scope,
    )
    assert len(lost) == 1


async def count(db_url: str, sql: str, *params: Any) -> int:
    return len(await read_rows(db_url, sql, *params))


async def test_a_schedule_made_again_after_its_answer_was_lost_is_the_same_schedule(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        first = await client.post("/v1/schedules", json=SCHEDULE, headers={**admin, KEY: "schedule-1"})
        assert first.status_code == 201, first.text
        await answer_lost(db_url, "schedule-1")
        again = await client.post("/v1/schedules", json=SCHEDULE, headers={**admin, KEY: "schedule-1"})
        assert again.status_code == 201 and REPLAYED not in again.headers
        assert again.json() == first.json()
        # The same key from another admin is that admin's own: a schedule of its own.
        other = await client.post("/v1/schedules", json=SCHEDULE, headers={**await as_(h, "root2", "admin"),
                                                                           KEY: "schedule-1"})  # fmt: skip
        assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    assert await count(db_url, "SELECT 1 FROM schedules") == 2  # one per admin: every fire is not doubled
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'schedule.created'") == 2


async def test_a_schedule_key_whose_answer_was_purged_refuses_another_request(db_url: str, tmp_path: Path) -> None:
    # Past TICKETIQ_IDEMPOTENCY_TTL_S the key's answer is purged but the schedule's id still derives from the
    # key: the same request finds it again; another request under that key is refused, not answered with it.
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        first = await client.post("/v1/schedules", json=SCHEDULE, headers={**admin, KEY: "schedule-2"})
        await read_rows(db_url, "DELETE FROM idempotency_keys")
        same = await client.post("/v1/schedules", json=SCHEDULE, headers={**admin, KEY: "schedule-2"})
        assert same.status_code == 201 and same.json()["id"] == first.json()["id"]
        await read_rows(db_url, "DELETE FROM idempotency_keys")
        changed = await client.post("/v1/schedules", json={**SCHEDULE, "input": "Look at OPS-2"},
                                    headers={**admin, KEY: "schedule-2"})  # fmt: skip
        assert changed.status_code == 422 and changed.json()["detail"][0]["loc"] == ["header", KEY]
        assert first.json()["id"] in changed.json()["detail"][0]["msg"]
    assert await count(db_url, "SELECT 1 FROM schedules") == 1


async def test_a_decision_made_again_after_its_answer_was_lost_answers_the_decision(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (client, h):
        ops = await as_(h, "ops", "operator")
        approval_id = await waiting_approval(client, ops, "check OPS-3")
        decision = {"decision": "reject", "reason": "not now"}
        first = await client.post(f"/v1/approvals/{approval_id}", json=decision, headers={**ops, KEY: "decide-1"})
        assert first.status_code == 200, first.text
        await answer_lost(db_url, "decide-1")
        again = await client.post(f"/v1/approvals/{approval_id}", json=decision, headers={**ops, KEY: "decide-1"})
        assert again.status_code == 200 and REPLAYED not in again.headers, again.text
        assert again.json() == first.json()
        # Another decision, or the same one by another person, is still refused: it was decided already.
        flipped = await client.post(f"/v1/approvals/{approval_id}", json={"decision": "approve"}, headers=ops)
        other = await client.post(f"/v1/approvals/{approval_id}", json=decision,
                                  headers=await as_(h, "ops2", "operator"))  # fmt: skip
        for refused in (flipped, other):
            assert refused.status_code == 409 and refused.json()["detail"][0]["loc"] == ["path", "approval_id"]
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'approval.decided'") == 1
    assert h.probe.writes() == []  # rejected: the write was never sent


async def test_a_job_restarted_again_after_its_answer_was_lost_answers_the_same_job(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (client, h):
        ops = await as_(h, "ops", "operator")
        made = (await client.post("/v1/jobs", json={"kind": "count", "params": {"to": 3}}, headers=ops)).json()
        assert (await client.post(f"/v1/jobs/{made['id']}/cancel", headers=ops)).json()["status"] == "cancelled"
        first = await client.post(f"/v1/jobs/{made['id']}/restart", headers={**ops, KEY: "restart-1"})
        assert first.status_code == 201, first.text
        await answer_lost(db_url, "restart-1")
        again = await client.post(f"/v1/jobs/{made['id']}/restart", headers={**ops, KEY: "restart-1"})
        assert again.status_code == 201 and REPLAYED not in again.headers, again.text
        assert again.json()["id"] == first.json()["id"]
        assert again.json()["restarted_from"] == made["id"]
        # Once per job still: another restart (another key, or none) is 409 naming the restart.
        twice = await client.post(f"/v1/jobs/{made['id']}/restart", headers={**ops, KEY: "restart-2"})
        assert twice.status_code == 409 and first.json()["id"] in twice.json()["detail"][0]["msg"]
    assert await count(db_url, "SELECT 1 FROM jobs WHERE restarted_from IS NOT NULL") == 1
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'job.restarted'") == 1


async def grant_keyed_write(client: httpx.AsyncClient, h: Harness, principal: str) -> None:
    granted = await client.put(f"/v1/gates/grants/{principal}/probe_keyed", json={"granted": True},
                               headers=await as_(h, "root", "admin"))  # fmt: skip
    assert granted.status_code == 200, granted.text


async def test_an_inspector_call_with_a_key_is_sent_once_however_often_it_is_asked(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        ops = await as_(h, "ops", "operator")
        await grant_keyed_write(client, h, "ops")
        first = await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers={**ops, KEY: "call-1"})
        assert first.status_code == 200 and first.json()["ok"] is True, first.text
        repeat = await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers={**ops, KEY: "call-1"})
        assert repeat.headers.get(REPLAYED) == "true" and repeat.json() == first.json()
        other_args = {**KEYED_WRITE, "args": {"note": "something else"}}
        refused = await client.post("/v1/inspector/calls", json=other_args, headers={**ops, KEY: "call-1"})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["header", KEY]
        # The answer lost after the write was made and audited: the retry is told that outcome, not sent.
        await answer_lost(db_url, "call-1")
        again = await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers={**ops, KEY: "call-1"})
        assert again.status_code == 200 and REPLAYED not in again.headers, again.text
        shown = again.json()
        assert (shown["key"], shown["ok"], shown["uncertain"]) == (first.json()["key"], True, False)
        assert shown["audit_id"] == first.json()["audit_id"]
        assert len(h.probe.writes()) == 1
        # Without a key, each request is a call of its own, with a fresh key.
        plain = [await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers=ops) for _ in range(2)]
        assert len({p.json()["key"] for p in plain} | {first.json()["key"]}) == 3
    assert [w["key"] for w in h.probe.writes()][1:] == [p.json()["key"] for p in plain]


async def test_an_inspector_write_whose_process_died_mid_send_is_never_sent_again(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        ops = await as_(h, "ops", "operator")
        await grant_keyed_write(client, h, "ops")
        first = await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers={**ops, KEY: "call-2"})
        assert first.status_code == 200, first.text
        # As a process killed while the write was in flight leaves it: started on record, no outcome.
        await read_rows(db_url, "DELETE FROM audit_log WHERE action = 'inspector.call' AND detail->>'key' = %s",
                        first.json()["key"])  # fmt: skip
        await answer_lost(db_url, "call-2")
        again = await client.post("/v1/inspector/calls", json=KEYED_WRITE, headers={**ops, KEY: "call-2"})
        assert again.status_code == 200, again.text
        shown = again.json()
        assert (shown["key"], shown["ok"], shown["uncertain"]) == (first.json()["key"], False, True)
        assert "not sent again" in shown["error"]
        assert len(h.probe.writes()) == 1
    started = await read_rows(db_url, "SELECT 1 FROM audit_log WHERE action = 'inspector.call.started'")
    assert len(started) == 1


async def test_a_run_or_a_co_pilot_turn_made_again_after_its_answer_was_lost_is_the_same_run(
    db_url: str, tmp_path: Path
) -> None:
    # The run carries its key, atomic with its birth, in its maker's namespace (run_keys): the retry finds it.
    async with site(db_url, tmp_path) as (client, h):
        cal = await as_(h, "cal", "caller")
        turn = {"agent": "a", "ticket": "OPS-5", "question": "what broke?"}
        first_turn = await client.post("/v1/copilot/turns", json=turn, headers={**cal, KEY: "same-key"})
        first_run = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-5"},
                                      headers={**cal, KEY: "same-key"})  # fmt: skip
        assert first_turn.status_code in (200, 202) and first_run.status_code == 201
        await answer_lost(db_url, "same-key", "POST /v1/copilot/turns")
        again = await client.post("/v1/copilot/turns", json=turn, headers={**cal, KEY: "same-key"})
        assert again.status_code in (200, 202) and REPLAYED not in again.headers, again.text
        assert again.json()["run_id"] == first_turn.json()["run_id"]
        # POST /v1/runs keeps no Idempotency-Key row (issue 19): the run, made with its key in one commit, is
        # the record, so an answer lost after the making (the same crash) is answered from the run row as a
        # repeat: the same run and the status it was made with, byte for byte.
        assert await count(db_url, "SELECT 1 FROM idempotency_keys WHERE scope = 'POST /v1/runs'") == 0
        again = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-5"},
                                  headers={**cal, KEY: "same-key"})  # fmt: skip
        assert again.status_code == 201 and again.headers[REPLAYED] == "true", again.text
        assert again.content == first_run.content
    keys = await read_rows(db_url, "SELECT channel, idempotency_key FROM runs ORDER BY channel")
    assert keys == [{"channel": "api", "idempotency_key": "api\tcal\tsame-key"},
                    {"channel": "copilot", "idempotency_key": "copilot\tcal\tsame-key"}]  # fmt: skip
