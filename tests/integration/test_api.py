"""The HTTP API over a real socket: runs, Idempotency-Key, bad input, approvals, Stop, gates, audit.

Every request carries an admin's bearer token, named `ops`: whoever acts in a decision, a Stop or a gate
change is that name (tests/integration/test_auth.py covers who may do what)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.engine import run_keys
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"a": [READ, WRITE, {"text": "answered {jira_key}"}]}
AGENTS = {"a": {"tools": ["probe_read", "probe_write"]}}
ACTOR = "ops"


@asynccontextmanager
async def api(
    db_url: str, tmp: Path, actor: str = ACTOR, **kw: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, **kw) as h:
        token = await h.token(actor, "admin")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield client, h


async def until(client: httpx.AsyncClient, run_id: str, *statuses: str) -> dict[str, Any]:
    for _ in range(600):
        run: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] in statuses:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {statuses}: {run}")


async def test_a_run_is_created_executed_and_readable(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, _):
        created = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-7"})
        assert created.status_code == 201
        assert set(created.json()) == {"id", "status"}
        run = await until(client, created.json()["id"], "succeeded")
        assert run["answer"] == "answered OPS-7"
        assert (run["steps"], run["attempt"], run["losses"]) == (2, 1, 0)
        assert run["created_at"] and run["finished_at"]
        kinds = [e["kind"] for e in (await client.get(f"/v1/runs/{run['id']}/transcript")).json()["entries"]]
        assert kinds[0] == "input" and kinds[-2:] == ["answer", "statement"]
        assert "model_step" in kinds and "gate" in kinds and "call" in kinds
        assert (await client.get("/openapi.json")).json()["paths"]["/v1/runs"]


async def test_idempotency_key_returns_the_same_run_and_refuses_another_body(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, _):
        body = {"agent": "a", "input": "check OPS-8"}
        first = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-1"})
        again = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-1"})
        assert first.status_code == again.status_code == 201
        assert first.json()["id"] == again.json()["id"]
        other = await client.post("/v1/runs", json={**body, "input": "check OPS-9"}, headers={"Idempotency-Key": "k-1"})
        assert other.status_code == 422
        assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
        await until(client, first.json()["id"], "succeeded")
    assert await read_rows(db_url, "SELECT count(*) AS n FROM runs") == [{"n": 1}]


async def test_a_run_is_made_under_the_token_s_own_key_and_a_run_it_did_not_make_is_never_handed_out(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        body = {"agent": "a", "input": "check OPS-10"}
        made = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": "k-1"})
        keys = await read_rows(db_url, "SELECT idempotency_key FROM runs WHERE id = %s", made.json()["id"])
        assert keys == [{"idempotency_key": run_keys.api(ACTOR, "k-1")}]
        # A row put in the database by other means under this token's key: another token's run (or one
        # on another channel) is refused, and its id is not told.
        agent = h.engine.deps.catalog.get("a")
        for channel, created_by, key in (("api", "mallory", "k-2"), ("copilot", ACTOR, "k-3")):
            forged = await h.engine.create_run(agent, "check OPS-10", channel=channel, created_by=created_by,
                                               idempotency_key=run_keys.api(ACTOR, key), actor=created_by)  # fmt: skip
            refused = await client.post("/v1/runs", json=body, headers={"Idempotency-Key": key})
            assert refused.status_code == 422 and forged.id not in refused.text
            assert refused.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
            assert (await client.get(f"/v1/runs/{forged.id}")).json()["status"] == "queued"  # not started either


async def test_bad_input_names_the_field_and_writes_nothing(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, _):
        unknown = await client.post("/v1/runs", json={"agent": "nobody", "input": "x"})
        assert unknown.status_code == 404
        assert unknown.json()["detail"][0]["loc"] == ["body", "agent"]
        for body, field in [
            ({"agent": "a"}, "input"),
            ({"agent": "a", "input": ""}, "input"),
            ({"agent": "a", "input": "x", "extra": 1}, "extra"),
            ({"agent": "a", "input": "x", "may_wait": "maybe"}, "may_wait"),
        ]:
            response = await client.post("/v1/runs", json=body)
            assert response.status_code == 422, body
            assert response.json()["detail"][0]["loc"][-1] == field
        assert (await client.get("/v1/runs/not-a-uuid")).status_code == 422
        assert (await client.get("/v1/runs/00000000-0000-0000-0000-000000000000")).status_code == 404
    assert await read_rows(db_url, "SELECT count(*) AS n FROM runs") == [{"n": 0}]


async def test_an_approved_write_waits_then_goes_out_with_the_approval_key(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path, approval=["probe_write"]) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-10"})).json()["id"]
        await until(client, run_id, "waiting")
        pending = (await client.get("/v1/approvals")).json()["approvals"]
        assert [p["tool"] for p in pending] == ["probe_write"]
        assert h.probe.writes() == []  # held, not sent
        decided = await client.post(f"/v1/approvals/{pending[0]['id']}", json={"decision": "approve"})
        assert decided.status_code == 200 and decided.json()["status"] == "approved"
        assert decided.json()["decided_by"] == ACTOR
        run = await until(client, run_id, "succeeded")
        twice = await client.post(f"/v1/approvals/{pending[0]['id']}", json={"decision": "reject"})
        assert twice.status_code == 409
    from ticketiq.engine.step_keys import approval_key

    assert [w["key"] for w in h.probe.writes()] == [approval_key(pending[0]["id"])]
    assert run["attempt"] == 2  # the decision took the waiting run under a new attempt
    audit = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s", run_id)
    assert "approval.decided" in [a["action"] for a in audit]


async def test_a_rejected_write_is_refused_back_to_the_model(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path, approval=["probe_write"]) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-11"})).json()["id"]
        await until(client, run_id, "waiting")
        approval = (await client.get("/v1/approvals")).json()["approvals"][0]
        await client.post(f"/v1/approvals/{approval['id']}", json={"decision": "reject"})
        await until(client, run_id, "succeeded")
    assert h.probe.writes() == []
    state = await read_rows(db_url, "SELECT state::jsonb AS state FROM checkpoints WHERE run_id = %s", run_id)
    tool_messages = [m["content"] for m in state[0]["state"]["messages"] if m["role"] == "tool"]
    assert f"approval rejected by {ACTOR}" in tool_messages[-1]


async def test_a_quarantined_agent_is_refused_and_the_reason_reaches_the_model(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, h):
        response = await client.put("/v1/gates/quarantines/agent/a", json={"reason": "under review"})
        assert response.status_code == 200
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-12"})).json()["id"]
        run = await until(client, run_id, "failed")
    assert "agent a is quarantined: under review" in run["error"]
    assert h.probe.received == []
    audit = await read_rows(db_url, "SELECT action FROM audit_log WHERE action = 'gate.changed'")
    assert len(audit) == 1


async def test_a_revoked_tool_is_refused_with_the_reason_as_its_result(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, h):
        await client.put("/v1/gates/grants/tester/probe_write", json={"granted": False})
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-13"})).json()["id"]
        await until(client, run_id, "succeeded")
        entries = (await client.get(f"/v1/runs/{run_id}/transcript")).json()["entries"]
    assert h.probe.writes() == []
    refusals = [e for e in entries if e["kind"] == "gate" and e["verdict"] == "refuse"]
    assert refusals[0]["reason"] == "owner tester may not use tool probe_write"


async def test_stop_ends_a_waiting_run_and_a_running_one_at_its_next_step(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path, approval=["probe_write"]) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-14"})).json()["id"]
        await until(client, run_id, "waiting")
        stopped = await client.post(f"/v1/runs/{run_id}/stop", json={})
        assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"
        assert (await client.get(f"/v1/runs/{run_id}")).json()["error"] == f"stopped by {ACTOR}"
    async with api(db_url, tmp_path, actor="ops-2", latency_ms=400) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-15"})).json()["id"]
        await client.post(f"/v1/runs/{run_id}/stop")
        run = await until(client, run_id, "stopped", "failed")
    assert run["status"] == "stopped" and "stopped by ops-2" in run["error"]
    assert h.probe.writes() == []
    audit = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s", run_id)
    assert "agent.run.stop_requested" in [a["action"] for a in audit]


async def test_audit_lists_a_runs_entries(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, _):
        run_id = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-16"})).json()["id"]
        await until(client, run_id, "succeeded")
        entries = (await client.get("/v1/audit", params={"run_id": run_id})).json()["entries"]
        assert [e["action"] for e in entries] == ["agent.run.created", "agent.run.succeeded"]
        assert (await client.get("/healthz")).json() == {"ok": True}
        assert (await client.get("/readyz")).json()["ready"] is True
