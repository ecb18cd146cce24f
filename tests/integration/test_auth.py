"""Who may do what over HTTP (DESIGN.md, "Who may do what"), over a real socket and a real Postgres.

Every `/v1` route takes a bearer token: 401 without a valid one, 403 for a role that may not, and
neither writes anything. The actor of a decision, a Stop or a gate change is the token's name.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.run_statements import statements_run
from ticketiq.auth import tokens
from ticketiq.auth.token_cache import TokenCache
from ticketiq.entries.api import ROUTES, create_app
from ticketiq.errors import StorageError
from ticketiq.storage.token_store import Credential, TokenStore

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
DELEGATE: dict[str, Any] = {"calls": [{"tool": "delegate_to_agent", "arguments": {"agent": "a", "input": "{input}"}}]}
SCRIPTS = {
    "a": [READ, WRITE, {"text": "answered {jira_key}"}],
    "b": [WRITE, {"text": "b wrote {jira_key}"}],
    "d": [DELEGATE, {"text": "delegated {jira_key}"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "a": {"tools": ["probe_read", "probe_write"]},
    "b": {"tools": ["probe_write"], "may_wait": False},
    "d": {"tools": ["delegate_to_agent"]},
}
# Everything a request could write; a refused request leaves each exactly as it was.
TABLES = ("runs", "checkpoints", "calls", "transcripts", "approvals", "audit_log", "quarantines", "channels",
          "principals", "grants", "tool_policies", "api_tokens", "triggers", "trigger_secrets", "trigger_deliveries",
          "ticket_events", "schedules", "schedule_fires", "teams_inbox")  # fmt: skip
# Entry points from outside that authenticate by their own signature instead of our token (DESIGN.md,
# "Who may do what"): each refuses an unsigned request, whatever bearer token it carries, with the
# header it needs.
SIGNED = {("POST", "/v1/hooks/{name}"): "X-TicketIQ-Signature", ("POST", "/v1/ticket-events"): "X-Hub-Signature"}
SECRET = "auth-test-trigger-secret-0123"
# The Teams inbox authenticates each activity by its Bot Framework JWT (entries/teams.py), not by our token.
TEAMS_MESSAGES = ("POST", "/v1/teams/messages")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def snapshot(db_url: str) -> dict[str, tuple[int, str]]:
    """Each table's row count and a digest of its rows: an UPDATE shows as well as an INSERT."""
    out = {}
    for table in TABLES:
        row = (await read_rows(db_url, f"SELECT count(*) AS n, md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), "
                                       f"'')) AS digest FROM {table} t"))[0]  # fmt: skip
        out[table] = (int(row["n"]), str(row["digest"]))
    return out


@dataclass
class Site:
    client: httpx.AsyncClient
    h: Harness
    db_url: str
    routes: set[tuple[str, str]]  # every (method, path template) of /v1

    async def until(self, run_id: str, token: str, *statuses: str) -> dict[str, Any]:
        run: dict[str, Any] = {}
        for _ in range(600):
            run = (await self.client.get(f"/v1/runs/{run_id}", headers=bearer(token))).json()
            if run["status"] in statuses:
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} never reached {statuses}: {run}")


@asynccontextmanager
async def site(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[Site]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, **kw) as h:
        app = create_app(h.settings, h.process)
        routes = {(m, r.path) for r in ROUTES.routes if isinstance(r, APIRoute) and r.path.startswith("/v1")
                  for m in r.methods or ()}  # fmt: skip
        async with serving(app) as base, httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client:
            yield Site(client, h, db_url, routes)


@pytest.mark.long
async def test_every_v1_route_refuses_a_missing_malformed_unknown_or_revoked_token_and_writes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, approval=["probe_write"], jira_webhook_secret="jira-auth-secret-0123") as s:
        admin = await s.h.token("root", "admin")
        revoked = await s.h.token("gone", "admin")
        assert await TokenStore(s.h.process.db).revoke("gone", "test") is not None
        # Something for every route to act on, had it let the request through.
        run_id = (await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-1"},
                                      headers=bearer(admin))).json()["id"]  # fmt: skip
        await s.until(run_id, admin, "waiting")
        approval_id = (await s.client.get("/v1/approvals", headers=bearer(admin))).json()["approvals"][0]["id"]
        assert (await s.client.put("/v1/gates/quarantines/agent/zz", json={}, headers=bearer(admin))).status_code == 200
        hook = {"name": "hooked", "agent": "a", "secret": SECRET}
        assert (await s.client.post("/v1/triggers", json=hook, headers=bearer(admin))).status_code == 201
        second = await s.client.post(
            "/v1/triggers/hooked/secrets", json={"secret": SECRET + "2"}, headers=bearer(admin)
        )
        assert second.status_code == 201
        # Once a year, not each minute: a minute's fire while the refusals run (they take seconds, more beside
        # other tests) wrote its run and fire between the two snapshots.
        schedule = {"agent": "a", "cron": "0 0 1 1 *", "timezone": "UTC", "input": "check OPS-7"}
        schedule_id = (await s.client.post("/v1/schedules", json=schedule, headers=bearer(admin))).json()["id"]
        requests: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {
            ("POST", "/v1/runs"): ("/v1/runs", {"agent": "a", "input": "check OPS-2"}),
            ("GET", "/v1/runs"): ("/v1/runs", None),
            ("GET", "/v1/processes"): ("/v1/processes", None),
            ("GET", "/v1/runs/{run_id}"): (f"/v1/runs/{run_id}", None),
            ("GET", "/v1/runs/{run_id}/transcript"): (f"/v1/runs/{run_id}/transcript", None),
            ("GET", "/v1/runs/{run_id}/timeline"): (f"/v1/runs/{run_id}/timeline", None),
            ("GET", "/v1/runs/{run_id}/events"): (f"/v1/runs/{run_id}/events", None),
            ("POST", "/v1/runs/{run_id}/stop"): (f"/v1/runs/{run_id}/stop", {}),
            ("POST", "/v1/runs/{run_id}/resume"): (f"/v1/runs/{run_id}/resume", {}),
            ("POST", "/v1/runs/{run_id}/hold"): (f"/v1/runs/{run_id}/hold", {}),
            ("DELETE", "/v1/runs/{run_id}/hold"): (f"/v1/runs/{run_id}/hold", {}),
            ("POST", "/v1/runs/{run_id}/input"): (f"/v1/runs/{run_id}/input", {"text": "staging"}),
            ("POST", "/v1/copilot/turns"): ("/v1/copilot/turns", {"agent": "a", "ticket": "OPS-3", "question": "q"}),
            ("GET", "/v1/approvals"): ("/v1/approvals", None),
            ("POST", "/v1/approvals/{approval_id}"): (f"/v1/approvals/{approval_id}", {"decision": "approve"}),
            ("GET", "/v1/audit"): ("/v1/audit", None),
            ("GET", "/v1/gates"): ("/v1/gates", None),
            ("PUT", "/v1/gates/quarantines/{kind}/{name}"): ("/v1/gates/quarantines/agent/a", {"reason": "x"}),
            ("DELETE", "/v1/gates/quarantines/{kind}/{name}"): ("/v1/gates/quarantines/agent/zz", None),
            ("PUT", "/v1/gates/channels/{name}"): ("/v1/gates/channels/api", {"enabled": False}),
            ("PUT", "/v1/gates/grants/{principal}/{tool}"): ("/v1/gates/grants/tester/probe_read", {"granted": False}),
            ("PUT", "/v1/gates/principals/{name}"): ("/v1/gates/principals/tester", {"may_run": False}),
            ("PUT", "/v1/gates/policies/{tool}"): ("/v1/gates/policies/probe_write", {"needs_approval": False}),
            ("GET", "/v1/tokens"): ("/v1/tokens", None),
            ("POST", "/v1/tokens"): ("/v1/tokens", {"name": "intruder", "role": "admin"}),
            ("DELETE", "/v1/tokens/{name}"): ("/v1/tokens/root", None),
            ("POST", "/v1/schedules"): ("/v1/schedules", schedule),
            ("GET", "/v1/schedules"): ("/v1/schedules", None),
            ("DELETE", "/v1/schedules/{schedule_id}"): (f"/v1/schedules/{schedule_id}", None),
            ("GET", "/v1/schedules/{schedule_id}/fires"): (f"/v1/schedules/{schedule_id}/fires", None),
            ("POST", "/v1/triggers"): ("/v1/triggers", {"name": "intruder", "agent": "a", "secret": SECRET}),
            ("GET", "/v1/triggers"): ("/v1/triggers", None),
            ("POST", "/v1/triggers/{name}/secrets"): ("/v1/triggers/hooked/secrets", {"secret": SECRET + "3"}),
            ("DELETE", "/v1/triggers/{name}/secrets/{n}"): ("/v1/triggers/hooked/secrets/1", None),
            ("GET", "/v1/teams/inbox"): ("/v1/teams/inbox", None),
            ("POST", "/v1/inspector/calls"): ("/v1/inspector/calls", {"tool": "probe_write", "args": {"note": "x"}}),
            ("POST", "/v1/jobs"): ("/v1/jobs", {"kind": "source_sync", "params": {}}),
            ("GET", "/v1/jobs"): ("/v1/jobs", None),
            ("GET", "/v1/jobs/{job_id}"): (f"/v1/jobs/{run_id}", None),
            ("POST", "/v1/jobs/{job_id}/cancel"): (f"/v1/jobs/{run_id}/cancel", None),
            ("POST", "/v1/jobs/{job_id}/restart"): (f"/v1/jobs/{run_id}/restart", None),
            ("GET", "/v1/workflows"): ("/v1/workflows", None),
            ("POST", "/v1/workflows/{name}/runs"): ("/v1/workflows/follow-up/runs", {"input": {"issue": "OPS-1"}}),
            ("GET", "/v1/workflows/{name}/runs/{run_id}"): (f"/v1/workflows/follow-up/runs/{run_id}", None),
        }
        assert set(requests) | set(SIGNED) | {TEAMS_MESSAGES} == s.routes  # a new route is added here, and so tested
        before = await snapshot(db_url)
        refusals = {
            "missing": {},
            "another scheme": {"Authorization": f"Basic {admin}"},
            "no token after the scheme": {"Authorization": "Bearer"},
            "malformed": bearer("tiq_short"),
            "the hash sent instead": bearer(tokens.token_hash(admin)),
            "unknown": bearer(tokens.mint()),
            "revoked": bearer(revoked),
        }
        for why, headers in refusals.items():
            for (method, _), (path, body) in requests.items():
                response = await s.client.request(method, path, json=body, headers=headers)
                assert response.status_code == 401, (why, method, path, response.text)
                assert response.headers["WWW-Authenticate"].startswith('Bearer realm="ticketiq"')
                assert response.json()["detail"][0]["loc"] == ["header", "Authorization"]
                assert "ticketiq tokens create" in response.json()["detail"][0]["msg"]
        # Refused before the body is read: a body that is not even JSON gets the 401, not a 422.
        garbled = await s.client.post("/v1/runs", content=b"{not json", headers={"content-type": "application/json"})
        assert garbled.status_code == 401
        assert (await s.client.get("/v1/no-such-route")).status_code == 401
        # The signed entry points take no token, not even a valid one: unsigned, each is refused.
        signed_paths = {
            ("POST", "/v1/hooks/{name}"): "/v1/hooks/hooked",
            ("POST", "/v1/ticket-events"): "/v1/ticket-events",
        }
        assert set(signed_paths) == set(SIGNED)
        for why, headers in {**refusals, "a valid admin token": bearer(admin)}.items():
            for route, path in signed_paths.items():
                response = await s.client.post(path, json={"webhookEvent": "jira:issue_created"}, headers=headers)
                assert response.status_code == 401, (why, route, response.text)
                assert response.headers["WWW-Authenticate"].startswith("HMAC-SHA256")
                assert response.json()["detail"][0]["loc"] == ["header", SIGNED[route]]
        # The Teams inbox takes a Bot Framework JWT only: none of our tokens, not even a valid one, is one.
        activity = {"type": "message", "id": "1", "serviceUrl": "http://127.0.0.1:9/teams", "channelId": "msteams",
                    "from": {"id": "29:x"}, "conversation": {"id": "19:c@thread.tacv2"}, "text": "OPS-1"}  # fmt: skip
        for why, headers in {**refusals, "a valid admin token": bearer(admin)}.items():
            response = await s.client.post(TEAMS_MESSAGES[1], json=activity, headers=headers)
            assert response.status_code == 401, (why, response.text)
            assert response.headers["WWW-Authenticate"].startswith('Bearer realm="botframework"')
            assert response.json()["detail"][0]["loc"] == ["header", "Authorization"]
        assert await snapshot(db_url) == before
        assert s.h.probe.writes() == []


async def test_each_role_is_refused_what_it_may_not_do_with_403_and_nothing_written(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, approval=["probe_write"]) as s:
        caller = await s.h.token("cal", "caller", ["a"])
        operator = await s.h.token("opal", "operator")
        theirs = (await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-3"},
                                      headers=bearer(operator))).json()["id"]  # fmt: skip
        mine = (await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-4"},
                                    headers=bearer(caller))).json()["id"]  # fmt: skip
        await s.until(theirs, operator, "waiting")
        await s.until(mine, caller, "waiting")
        approval_id = (await s.client.get("/v1/approvals", headers=bearer(operator))).json()["approvals"][0]["id"]
        before = await snapshot(db_url)

        operators_only: list[tuple[str, str, dict[str, Any] | None]] = [
            ("GET", "/v1/approvals", None),
            ("POST", f"/v1/approvals/{approval_id}", {"decision": "approve"}),
            ("POST", f"/v1/approvals/{approval_id}", {"decision": "maybe"}),  # refused before it is validated
            ("POST", f"/v1/runs/{mine}/stop", {}),
            ("GET", "/v1/audit", None),
            ("GET", "/v1/processes", None),
            ("GET", "/v1/gates", None),
            ("GET", "/v1/schedules", None),
            ("GET", f"/v1/schedules/{mine}/fires", None),  # refused before it is looked up
            ("GET", "/v1/teams/inbox", None),
            ("POST", "/v1/inspector/calls", {"tool": "probe_write", "args": {"note": "x"}}),
            ("POST", "/v1/jobs", {"kind": "source_sync", "params": {}}),  # refused before the kind is looked at
            ("GET", "/v1/jobs", None),
            ("GET", f"/v1/jobs/{mine}", None),
            ("POST", f"/v1/jobs/{mine}/cancel", None),
            ("POST", f"/v1/jobs/{mine}/restart", None),
        ]
        admins_only: list[tuple[str, str, dict[str, Any] | None]] = [
            ("PUT", "/v1/gates/quarantines/agent/a", {"reason": "x"}),
            ("DELETE", "/v1/gates/quarantines/agent/a", None),
            ("PUT", "/v1/gates/channels/api", {"enabled": False}),
            ("PUT", "/v1/gates/grants/tester/probe_read", {"granted": False}),
            ("PUT", "/v1/gates/principals/tester", {"may_run": False}),
            ("PUT", "/v1/gates/policies/probe_write", {"needs_approval": False}),
            ("GET", "/v1/tokens", None),
            ("POST", "/v1/tokens", {"name": "mine", "role": "admin"}),
            ("DELETE", "/v1/tokens/opal", None),
            ("POST", "/v1/triggers", {"name": "mine", "agent": "a", "secret": SECRET}),
            ("GET", "/v1/triggers", None),
            ("POST", "/v1/triggers/mine/secrets", {"secret": SECRET}),
            ("DELETE", "/v1/triggers/mine/secrets/1", None),
            ("POST", "/v1/schedules", {"agent": "a", "cron": "* * * * *", "input": "x"}),
            ("DELETE", f"/v1/schedules/{mine}", None),
        ]
        for who, token, refused, needed in [
            ("cal", caller, operators_only, "operator"),
            ("cal", caller, admins_only, "admin"),
            ("opal", operator, admins_only, "admin"),
        ]:
            for method, path, body in refused:
                response = await s.client.request(method, path, json=body, headers=bearer(token))
                assert response.status_code == 403, (who, method, path, response.text)
                detail = response.json()["detail"][0]
                assert detail["loc"] == ["header", "Authorization"]
                assert detail["msg"].startswith(f"token {who} (") and f"needs the {needed} role" in detail["msg"]

        # A caller reads only its own runs: another's is answered as if it did not exist.
        for path in (f"/v1/runs/{theirs}", f"/v1/runs/{theirs}/transcript"):
            hidden = await s.client.get(path, headers=bearer(caller))
            assert hidden.status_code == 404 and hidden.json()["detail"][0]["loc"] == ["path", "run_id"]
        assert (await s.client.get(f"/v1/runs/{mine}", headers=bearer(caller))).json()["created_by"] == "cal"
        assert (await s.client.get(f"/v1/runs/{mine}/transcript", headers=bearer(caller))).status_code == 200
        # An operator reads every run, the audit log and the gates.
        assert (await s.client.get(f"/v1/runs/{mine}", headers=bearer(operator))).status_code == 200
        assert (await s.client.get(f"/v1/runs/{mine}/transcript", headers=bearer(operator))).status_code == 200
        assert (await s.client.get("/v1/audit", headers=bearer(operator))).status_code == 200
        assert (await s.client.get("/v1/gates", headers=bearer(operator))).status_code == 200

        # A caller starts only the agents it is allowed; an unknown agent is not revealed as such.
        for agent in ("b", "nobody"):
            outside = await s.client.post("/v1/runs", json={"agent": agent, "input": "x"}, headers=bearer(caller))
            assert outside.status_code == 403
            assert outside.json()["detail"] == [
                {"loc": ["body", "agent"], "msg": f"token cal may not start agent {agent}; it may start: a"}
            ]
        assert await snapshot(db_url) == before
        assert s.h.probe.writes() == []


async def test_the_actor_of_every_decision_stop_and_gate_change_is_the_tokens_name(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, approval=["probe_write"]) as s:
        caller = await s.h.token("cal", "caller", ["a"])
        operator = await s.h.token("opal", "operator")
        admin = await s.h.token("root", "admin")
        first = (await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-5"},
                                     headers=bearer(caller))).json()["id"]  # fmt: skip
        second = (await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-6"},
                                      headers=bearer(caller))).json()["id"]  # fmt: skip
        await s.until(first, caller, "waiting")
        await s.until(second, caller, "waiting")
        pending = (await s.client.get("/v1/approvals", headers=bearer(operator))).json()["approvals"]
        approval = next(a for a in pending if a["run_id"] == first)

        # `by` is no longer a field: a body that asserts one is refused and changes nothing.
        before = await snapshot(db_url)
        for path, body, auth in [
            (f"/v1/approvals/{approval['id']}", {"decision": "approve", "by": "mallory"}, operator),
            (f"/v1/runs/{second}/stop", {"by": "mallory"}, operator),
            ("/v1/gates/quarantines/agent/zz", {"reason": "x", "by": "mallory"}, admin),
        ]:
            method = "PUT" if path.startswith("/v1/gates") else "POST"
            response = await s.client.request(method, path, json=body, headers=bearer(auth))
            assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "by"], path
        assert await snapshot(db_url) == before

        decided = await s.client.post(f"/v1/approvals/{approval['id']}", json={"decision": "approve"},
                                      headers=bearer(operator))  # fmt: skip
        assert decided.status_code == 200 and decided.json()["decided_by"] == "opal"
        stopped = await s.client.post(f"/v1/runs/{second}/stop", headers=bearer(operator))
        assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"
        gate = await s.client.put("/v1/gates/quarantines/agent/zz", json={"reason": "x"}, headers=bearer(admin))
        released = await s.client.delete("/v1/gates/quarantines/agent/zz", headers=bearer(admin))
        assert gate.status_code == released.status_code == 200
        assert (await s.until(first, caller, "succeeded"))["answer"] == "answered OPS-5"
        assert (await s.client.get(f"/v1/runs/{second}", headers=bearer(caller))).json()["error"] == "stopped by opal"

    audit = await read_rows(db_url, "SELECT action, run_id::text AS run_id, actor FROM audit_log ORDER BY id")
    actors = {(a["action"], a["run_id"]): a["actor"] for a in audit if a["action"] != "gate.changed"}
    assert actors[("agent.run.created", first)] == actors[("agent.run.created", second)] == "cal"
    assert actors[("approval.decided", first)] == "opal"
    assert actors[("agent.run.stop_requested", second)] == "opal"
    assert [a["actor"] for a in audit if a["action"] == "gate.changed"] == ["root", "root"]
    runs = await read_rows(db_url, "SELECT created_by, stopped_by FROM runs WHERE id = %s", second)
    assert runs == [{"created_by": "cal", "stopped_by": "opal"}]
    assert await read_rows(db_url, "SELECT decided_by FROM approvals WHERE id = %s", approval["id"]) == [
        {"decided_by": "opal"}
    ]


async def test_may_wait_is_refused_for_an_agent_whose_file_says_it_may_not_wait(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, approval=["probe_write"]) as s:
        caller = await s.h.token("cal", "caller")
        before = await snapshot(db_url)
        # The defect: `may_wait` turned "needs approval, refused" into "held", for the caller to approve.
        held = await s.client.post("/v1/runs", json={"agent": "b", "input": "check OPS-7", "may_wait": True},
                                   headers=bearer(caller))  # fmt: skip
        assert held.status_code == 422
        assert held.json()["detail"][0]["loc"] == ["body", "may_wait"]
        assert "may not wait" in held.json()["detail"][0]["msg"]
        assert await snapshot(db_url) == before
        # Where the file allows it, it is allowed.
        allowed = await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-8", "may_wait": True},
                                      headers=bearer(caller))  # fmt: skip
        assert allowed.status_code == 201
        # Without it, agent b's held write is refused back to its model (it may not wait): never sent.
        refused = await s.client.post("/v1/runs", json={"agent": "b", "input": "check OPS-9"}, headers=bearer(caller))
        run = await s.until(refused.json()["id"], caller, "succeeded", "failed")
        assert run["may_wait"] is False
    assert s.h.probe.writes() == []


async def test_an_idempotency_key_never_reaches_another_tokens_run(db_url: str, tmp_path: Path) -> None:
    # I19: each token's keys are its own (run_keys.api): the same key from another token makes that
    # token's own run, and a repeat from either finds its own.
    async with site(db_url, tmp_path) as s:
        one, other = await s.h.token("one", "caller"), await s.h.token("other", "caller")
        body = {"agent": "a", "input": "check OPS-10"}
        first = await s.client.post("/v1/runs", json=body, headers={**bearer(one), "Idempotency-Key": "k-1"})
        second = await s.client.post("/v1/runs", json=body, headers={**bearer(other), "Idempotency-Key": "k-1"})
        assert first.status_code == second.status_code == 201
        assert first.json()["id"] != second.json()["id"]
        for token, made in ((one, first), (other, second)):
            again = await s.client.post("/v1/runs", json=body, headers={**bearer(token), "Idempotency-Key": "k-1"})
            assert again.json()["id"] == made.json()["id"]
            await s.until(made.json()["id"], token, "succeeded")
    rows = await read_rows(db_url, "SELECT created_by FROM runs ORDER BY created_by")
    assert rows == [{"created_by": "one"}, {"created_by": "other"}]


async def test_a_delegated_child_is_readable_by_whoever_started_its_parent(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        caller = await s.h.token("cal", "caller", ["d", "a"])  # it may start `a` itself: a delegation may too
        parent = (await s.client.post("/v1/runs", json={"agent": "d", "input": "look at OPS-11"},
                                      headers=bearer(caller))).json()["id"]  # fmt: skip
        assert (await s.until(parent, caller, "succeeded", "failed"))["status"] == "succeeded"
        children = await read_rows(db_url, "SELECT id::text AS id, created_by FROM runs WHERE parent_run_id = %s",
                                   parent)  # fmt: skip
        assert [c["created_by"] for c in children] == ["cal"]
        child = await s.client.get(f"/v1/runs/{children[0]['id']}", headers=bearer(caller))
        assert child.status_code == 200 and child.json()["agent"] == "a"
    audit = await read_rows(db_url, "SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.created'",
                            children[0]["id"])  # fmt: skip
    assert audit == [{"actor": f"run:{parent}"}]


async def test_an_admin_makes_lists_and_revokes_tokens_shown_once_and_stored_hashed(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        admin = bearer(await s.h.token("root", "admin"))
        made = await s.client.post("/v1/tokens", json={"name": "newbie", "role": "caller", "agents": ["a"]},
                                   headers=admin)  # fmt: skip
        assert made.status_code == 201
        shown = made.json()
        token = shown.pop("token")
        assert tokens.well_formed(token)
        assert (shown["name"], shown["role"], shown["agents"], shown["revoked_at"]) == ("newbie", "caller", ["a"], None)

        # The token works, within its role and agents.
        started = await s.client.post("/v1/runs", json={"agent": "a", "input": "check OPS-12"}, headers=bearer(token))
        assert started.status_code == 201
        outside = await s.client.post("/v1/runs", json={"agent": "b", "input": "check OPS-12"}, headers=bearer(token))
        assert outside.status_code == 403
        await s.until(started.json()["id"], token, "succeeded")

        # Listed by name and role, never by token or hash.
        listed = (await s.client.get("/v1/tokens", headers=admin)).json()["tokens"]
        assert [(t["name"], t["role"], t["agents"]) for t in listed] == [("root", "admin", None),
                                                                         ("newbie", "caller", ["a"])]  # fmt: skip
        assert all(set(t) == {"name", "role", "agents", "created_at", "revoked_at"} for t in listed)

        # Bad requests name the field and write nothing.
        before = await snapshot(db_url)
        for body, status, field in [
            ({"name": "newbie", "role": "caller"}, 409, "name"),
            ({"name": "has space", "role": "caller"}, 422, "name"),
            ({"name": "", "role": "caller"}, 422, "name"),
            ({"name": "x", "role": "root"}, 422, "role"),
            ({"name": "x", "role": "caller", "agents": ["nobody"]}, 422, "agents"),
            ({"name": "x", "role": "caller", "agents": []}, 422, "agents"),
        ]:
            response = await s.client.post("/v1/tokens", json=body, headers=admin)
            assert response.status_code == status, body
            assert response.json()["detail"][0]["loc"][:2] == ["body", field], body
        assert (await s.client.delete("/v1/tokens/nobody", headers=admin)).status_code == 404
        assert await snapshot(db_url) == before

        revoked = await s.client.delete("/v1/tokens/newbie", headers=admin)
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        assert (await s.client.get("/v1/tokens", headers=bearer(token))).status_code == 401
        assert (await s.client.get(f"/v1/runs/{started.json()['id']}", headers=bearer(token))).status_code == 401
        again = await s.client.delete("/v1/tokens/newbie", headers=admin)
        assert again.status_code == 409 and "revoked already" in again.json()["detail"][0]["msg"]

    # Only the SHA-256 is kept; the token itself is stored nowhere, and the hash only in its own row.
    stored = await read_rows(db_url, "SELECT token_hash FROM api_tokens WHERE name = 'newbie'")
    assert stored == [{"token_hash": hashlib.sha256(token.encode()).hexdigest()}]
    tables = await read_rows(db_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    for table in [t["tablename"] for t in tables]:
        text = (await read_rows(db_url, f"SELECT coalesce(string_agg(t::text, ','), '') AS all FROM {table} t"))[0]
        assert token not in text["all"], table
        if table != "api_tokens":
            assert stored[0]["token_hash"] not in text["all"], table
    audit = await read_rows(db_url, "SELECT action, actor, detail FROM audit_log WHERE action IN "
                                    "('token.created', 'token.revoked') ORDER BY id")  # fmt: skip
    assert [(a["action"], a["actor"], a["detail"]["name"]) for a in audit] == [
        ("token.created", "test", "root"), ("token.created", "root", "newbie"), ("token.revoked", "root", "newbie")
    ]  # fmt: skip


async def test_health_readiness_metrics_and_the_openapi_stay_open(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        assert (await s.client.get("/healthz")).json() == {"ok": True}
        assert (await s.client.get("/readyz")).json()["ready"] is True
        assert "ticketiq_runs_resumed_total" in (await s.client.get("/metrics")).text
        spec = (await s.client.get("/openapi.json")).json()
        assert spec["components"]["securitySchemes"]["bearer"] == {
            "type": "http", "scheme": "bearer", "description": "A token from `ticketiq tokens create`."
        }  # fmt: skip
        assert spec["paths"]["/v1/runs"]["post"]["security"] == [{"bearer": []}]


async def test_a_refused_token_row_is_reported_without_its_hash(db_url: str, tmp_path: Path) -> None:
    # The driver's message quotes a failing row; it would reach the HTTP API's error log and the CLI.
    async with site(db_url, tmp_path) as s:
        digest = tokens.token_hash(tokens.mint())
        with pytest.raises(StorageError) as refused:
            await TokenStore(s.h.process.db).create("not a name", "caller", None, digest, "test")
    assert refused.value.sqlstate == "23514"  # the name check
    assert digest not in str(refused.value) and digest not in repr(refused.value)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


async def test_the_revoking_process_refuses_the_token_at_once_without_waiting_for_its_notification(
    db_url: str, tmp_path: Path
) -> None:
    # The cache is trusted but nobody listens, so no notification can drop the token: only the revoke's own
    # drop refuses it. (Over HTTP the notification raced the revoker's next request, and sometimes lost.)
    async with site(db_url, tmp_path) as s:
        token = tokens.mint()
        cache: TokenCache[Credential] = TokenCache()
        cache.listening()
        store = TokenStore(s.h.process.db, cache)
        await store.create("soon-gone", "caller", None, tokens.token_hash(token), "test")
        found = await store.credential(tokens.token_hash(token))
        assert found is not None and found.name == "soon-gone" and len(cache) == 1
        assert await store.revoke("soon-gone", "test") is not None
        assert await store.credential(tokens.token_hash(token)) is None
        assert len(cache) == 0


async def listening(*sites: Site) -> bool:
    return all(s.h.engine.deps.gate_watch.connected for s in sites)


async def token_lookups(db_url: str) -> int:
    """Lookups of a bearer token by its hash (tokens.credential) since the last reset, by any process."""
    ran = await statements_run(db_url, toplevel=False)
    return sum(n for q, n in ran.items() if "FROM api_tokens WHERE token_hash" in q)


async def test_a_token_revoked_on_one_process_is_refused_on_another_within_a_second(
    db_url: str, tmp_path: Path
) -> None:
    # Issue 19: each process keeps the tokens it found, so a request costs no lookup; a revocation is
    # heard by every process (LISTEN ticketiq_tokens, notified by the revoking transaction, migration 027)
    # and drops the token there at once.
    for home in ("one", "two"):
        (tmp_path / home).mkdir()
    async with site(db_url, tmp_path / "one") as one, site(db_url, tmp_path / "two", lead=False) as two:
        admin, caller = bearer(await one.h.token("root", "admin")), bearer(await one.h.token("cal", "caller"))
        nothing = "/v1/runs/00000000-0000-0000-0000-000000000000"
        # Found tokens are kept once a process listens for their changes.
        await eventually(lambda: listening(one, two), what="the gate and token listeners connected")
        for s in (one, two):
            assert (await s.client.get(nothing, headers=caller)).status_code == 404  # found, and kept
        await read_rows(db_url, "SELECT pg_stat_statements_reset()")
        for s in (one, two):
            assert (await s.client.get(nothing, headers=caller)).status_code == 404
        assert await token_lookups(db_url) == 0  # both answered from their cache

        assert (await one.client.delete("/v1/tokens/cal", headers=admin)).status_code == 200
        revoked_at = time.monotonic()
        while (refused := await two.client.get(nothing, headers=caller)).status_code == 404:
            assert time.monotonic() - revoked_at < 1.0, "the other process still serves the revoked token"
            await asyncio.sleep(0.01)
        assert refused.status_code == 401 and "revoked" in refused.json()["detail"][0]["msg"]
        assert time.monotonic() - revoked_at < 1.0
        assert (await one.client.get(nothing, headers=caller)).status_code == 401
        assert (await two.client.get(nothing, headers=admin)).status_code == 404  # another token stays served
