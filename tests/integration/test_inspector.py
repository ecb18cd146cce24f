"""The inspector over the HTTP API, an app process and the vendor stand-ins on real sockets: a person's
ad hoc call passes every gate as it stands, with the operator as run-as principal; it is sent once
with a key fresh per call, audited before the answer, and never sent again, not even when its outcome
is uncertain."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.crash import eventually
from tests.support.engine import read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.process import AppProcess
from ticketiq.storage.token_store import TokenStore

CALLS = "/v1/inspector/calls"
OPERATOR = "alice"
COMMENT = {"tool": "jira_add_comment", "args": {"issue_key": "OPS-42", "body": "looked at by hand"}}
READ = {"tool": "jira_get_issue", "args": {"issue_key": "OPS-42"}}


@dataclass
class Site:
    client: httpx.AsyncClient  # acts as the operator `alice`
    admin: httpx.AsyncClient  # changes the gates
    caller: httpx.AsyncClient
    standins: Standins
    db_url: str

    async def grant(self, tool: str, granted: bool = True, principal: str = OPERATOR) -> None:
        changed = await self.admin.put(f"/v1/gates/grants/{principal}/{tool}", json={"granted": granted})
        assert changed.status_code == 200, changed.text

    async def comments(self) -> list[dict[str, Any]]:
        return await self.standins.writes(vendor="jira", operation="add_comment")

    async def audit(self, action: str = "inspector.call") -> list[dict[str, Any]]:
        answer = await self.client.get("/v1/audit", params={"action": action})
        entries: list[dict[str, Any]] = answer.json()["entries"]
        return entries


@contextlib.asynccontextmanager
async def site(db_url: str, tmp: Path, standins: Standins) -> AsyncIterator[Site]:
    # An agents file of its own: its owner holds grants, never the operator.
    agents = tmp / "agents.yaml"
    agents.write_text(yaml.safe_dump({"agents": {"reader": {
        "model": "reader", "system_prompt": "Read the issue.", "owner": "ops-bot", "tenant": "acme",
        "tools": ["jira_get_issue", "jira_add_comment"],
    }}}))  # fmt: skip
    # A liveness heartbeat may take 2 s (4 polls), not the 1 s floor: this process shares its loop with the
    # test on a busy machine, and a heartbeat late there made it give up its identity and answer 503.
    settings = standins.settings(home=tmp, seal_keys="t:inspector-secret", http_timeout_s=5.0, agents=agents,
                                 liveness_poll_s=0.5)  # fmt: skip
    process = await AppProcess.start(settings)
    try:
        made = {}
        for name, role in ((OPERATOR, "operator"), ("root", "admin"), ("cal", "caller")):
            token = tokens.mint()
            assert await TokenStore(process.db).create(name, role, None, tokens.token_hash(token), "test") is not None
            made[name] = {"Authorization": f"Bearer {token}"}
        async with (
            serving(create_app(settings, process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers=made[OPERATOR]) as client,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers=made["root"]) as admin,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers=made["cal"]) as caller,
        ):
            yield Site(client, admin, caller, standins, db_url)
    finally:
        await process.stop()


@pytest.fixture
async def s(db_url: str, tmp_path: Path, standins: Standins) -> AsyncIterator[Site]:
    async with site(db_url, tmp_path, standins) as running:
        yield running


async def nothing_written_ahead(db_url: str) -> None:
    """No run, no call row, no run lease: nothing a resume or a sweep could ever send again."""
    rows = await read_rows(
        db_url,
        "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM calls) AS calls, "
        "(SELECT count(*) FROM checkpoints) AS checkpoints, "
        "(SELECT count(*) FROM leases WHERE name LIKE 'checkpoint:%%') AS leases",
    )
    assert rows == [{"runs": 0, "calls": 0, "checkpoints": 0, "leases": 0}]


async def test_a_granted_read_answers_the_issue_and_is_audited_as_the_operator(s: Site) -> None:
    await s.grant("jira_get_issue")
    answer = await s.client.post(CALLS, json=READ)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"tool", "key", "ok", "result", "error", "uncertain", "audit_id"}
    assert (body["tool"], body["ok"], body["uncertain"], body["error"]) == ("jira_get_issue", True, False, None)
    assert body["result"]["key"] == "OPS-42" and body["result"]["fields"]["summary"]
    [entry] = await s.audit()
    assert (entry["id"], entry["actor"], entry["run_id"]) == (body["audit_id"], OPERATOR, None)
    detail = entry["detail"]
    assert (detail["tool"], detail["key"], detail["outcome"], detail["tenant"]) == (
        "jira_get_issue", body["key"], "ok", "default",
    )  # fmt: skip
    assert detail["args"] == READ["args"] and len(detail["args_sha256"]) == 64
    assert detail["gate"] == {"verdict": "allow", "gate": "all", "reason": ""}
    assert await s.audit("inspector.call.started") == []  # a read changes nothing: nothing to record ahead
    await nothing_written_ahead(s.db_url)


async def test_a_granted_write_lands_once_with_the_key_it_answered(s: Site) -> None:
    await s.grant("jira_add_comment")
    answer = await s.client.post(CALLS, json=COMMENT)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["ok"], body["uncertain"]) == (True, False)
    [landed] = await s.comments()
    assert (landed["key"], landed["effect"], landed["target"]) == (body["key"], "applied", "OPS-42")
    assert body["result"] == {"issue_key": "OPS-42", "comment_id": landed["ref"]}
    [started] = await s.audit("inspector.call.started")
    [made] = await s.audit()
    assert started["id"] < made["id"] == body["audit_id"]
    assert started["actor"] == made["actor"] == OPERATOR
    assert started["detail"]["key"] == made["detail"]["key"] == body["key"]
    assert made["detail"]["outcome"] == "ok"
    await nothing_written_ahead(s.db_url)


async def test_two_identical_calls_are_two_calls_with_two_fresh_keys(s: Site) -> None:
    await s.grant("jira_add_comment")
    first = (await s.client.post(CALLS, json=COMMENT)).json()
    second = (await s.client.post(CALLS, json=COMMENT)).json()
    assert first["ok"] and second["ok"]
    assert first["key"] != second["key"]
    assert len(first["key"]) <= 25 and first["key"].startswith("tf")
    landed = await s.comments()
    assert [(w["key"], w["effect"]) for w in landed] == [(first["key"], "applied"), (second["key"], "applied")]
    entries = await s.audit()
    assert [e["detail"]["key"] for e in entries] == [first["key"], second["key"]]
    assert entries[0]["detail"]["args_sha256"] == entries[1]["detail"]["args_sha256"]


async def test_a_caller_token_is_refused_and_nothing_is_sent_or_audited(s: Site) -> None:
    await s.grant("jira_add_comment", principal="cal")
    refused = await s.caller.post(CALLS, json=COMMENT)
    assert refused.status_code == 403
    detail = refused.json()["detail"][0]
    assert detail["loc"] == ["header", "Authorization"] and "needs the operator role" in detail["msg"]
    assert await s.comments() == []
    assert await read_rows(s.db_url, "SELECT count(*) AS n FROM audit_log WHERE action LIKE 'inspector.%%'") == [
        {"n": 0}
    ]


async def test_no_grant_is_refused_at_run_as_and_nothing_is_sent(s: Site) -> None:
    # The agents' owner holds the grant; the operator does not, and a revoked grant is no grant.
    assert await read_rows(s.db_url, "SELECT principal FROM grants WHERE tool = 'jira_add_comment'") == [
        {"principal": "ops-bot"}
    ]
    await s.grant("jira_add_comment")
    await s.grant("jira_add_comment", granted=False)
    refused = await s.client.post(CALLS, json=COMMENT)
    assert refused.status_code == 403
    body = refused.json()
    assert body["gate"] == "run_as"
    assert body["detail"] == [{"loc": ["body", "tool"], "msg": "principal alice may not use tool jira_add_comment"}]
    assert await s.comments() == []
    [entry] = await s.audit()
    assert (entry["id"], entry["actor"]) == (body["audit_id"], OPERATOR)
    assert (entry["detail"]["outcome"], entry["detail"]["key"]) == ("refused", None)
    assert entry["detail"]["gate"]["gate"] == "run_as"


async def test_a_principal_barred_from_acting_is_refused_though_granted(s: Site) -> None:
    await s.grant("jira_add_comment")
    assert (await s.admin.put(f"/v1/gates/principals/{OPERATOR}", json={"may_run": False})).status_code == 200
    refused = await s.client.post(CALLS, json=COMMENT)
    assert (refused.status_code, refused.json()["gate"]) == (403, "run_as")
    assert "may no longer act" in refused.json()["detail"][0]["msg"]
    assert await s.comments() == []


async def test_the_inspector_channel_disabled_refuses_and_enabled_again_allows(s: Site) -> None:
    await s.grant("jira_add_comment")
    assert (await s.admin.put("/v1/gates/channels/inspector", json={"enabled": False})).status_code == 200
    refused = await s.client.post(CALLS, json=COMMENT)
    assert (refused.status_code, refused.json()["gate"]) == (403, "channel")
    assert refused.json()["detail"][0]["msg"] == "channel inspector is disabled"
    assert await s.comments() == []
    assert (await s.admin.put("/v1/gates/channels/inspector", json={"enabled": True})).status_code == 200
    assert (await s.client.post(CALLS, json=COMMENT)).json()["ok"] is True
    assert [e["detail"]["outcome"] for e in await s.audit()] == ["refused", "ok"]


async def test_a_quarantined_tenant_refuses_its_calls_and_no_other(s: Site) -> None:
    await s.grant("jira_add_comment")
    assert (await s.admin.put("/v1/gates/quarantines/tenant/default", json={"reason": "leak"})).status_code == 200
    refused = await s.client.post(CALLS, json=COMMENT)  # no tenant named: contained as `default`
    assert refused.status_code == 403
    assert refused.json()["detail"] == [{"loc": ["body", "tenant"], "msg": "tenant default is quarantined: leak"}]
    named = await s.client.post(CALLS, json={**COMMENT, "tenant": "acme"})
    assert named.status_code == 200 and named.json()["ok"] is True
    assert [w["key"] for w in await s.comments()] == [named.json()["key"]]
    assert [e["detail"]["tenant"] for e in await s.audit()] == ["default", "acme"]


async def test_a_tool_needing_approval_is_refused_never_held(s: Site) -> None:
    await s.grant("jira_add_comment")
    assert (await s.admin.put("/v1/gates/policies/jira_add_comment", json={"needs_approval": True})).status_code == 200
    refused = await s.client.post(CALLS, json=COMMENT)
    assert (refused.status_code, refused.json()["gate"]) == (403, "approval")
    assert "an ad hoc call does not wait" in refused.json()["detail"][0]["msg"]
    assert await s.comments() == []
    assert (await s.client.get("/v1/approvals")).json()["approvals"] == []  # nothing filed to wait on


async def test_bad_requests_name_the_field_and_nothing_is_sent_or_written(s: Site) -> None:
    await s.grant("jira_add_comment")
    await s.grant("delegate_to_agent")
    bad: list[tuple[dict[str, Any], list[str], str]] = [
        ({"tool": "jira_nope", "args": {}}, ["body", "tool"], "no tool named 'jira_nope'; known: "),
        ({"tool": "delegate_to_agent", "args": {"agent": "reader", "input": "x"}}, ["body", "tool"], "runs an agent"),
        ({"tool": "jira_add_comment", "args": {"body": "x"}}, ["body", "args", "issue_key"], "'issue_key' is required"),
        ({"tool": "jira_add_comment", "args": {"issue_key": "ops 1", "body": "x"}}, ["body", "args", "issue_key"],
         "must match"),
        ({"tool": "jira_add_comment", "args": {"issue_key": "OPS-1", "body": "x", "by": "bob"}},
         ["body", "args", "by"], "'by' is not allowed"),
    ]  # fmt: skip
    for body, loc, words in bad:
        refused = await s.client.post(CALLS, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["detail"][0]["loc"] == loc
        assert words in refused.json()["detail"][0]["msg"]
    malformed: list[tuple[dict[str, Any], str]] = [
        ({"args": {}}, "tool"),
        ({"tool": "jira_add_comment", "args": ["OPS-1"]}, "args"),
        ({**COMMENT, "by": "mallory"}, "by"),
        ({**COMMENT, "tenant": ""}, "tenant"),
    ]
    for body, field in malformed:
        refused = await s.client.post(CALLS, json=body)
        assert refused.status_code == 422, (body, refused.text)
        assert refused.json()["detail"][0]["loc"][-1] == field
    assert await s.comments() == []
    assert await read_rows(s.db_url, "SELECT count(*) AS n FROM audit_log WHERE action LIKE 'inspector.%%'") == [
        {"n": 0}
    ]


async def test_a_vendor_500_after_apply_is_uncertain_sent_once_and_never_again(s: Site) -> None:
    await s.grant("jira_add_comment")
    await s.standins.fault("jira", "500_after_apply", operation="add_comment")
    answer = await s.client.post(CALLS, json=COMMENT)
    assert answer.status_code == 200, answer.text  # not a 5xx: nothing invites a resend
    body = answer.json()
    assert (body["ok"], body["uncertain"], body["result"]) == (False, True, None)
    assert "jira failed (500)" in body["error"]
    assert [(w["key"], w["effect"]) for w in await s.comments()] == [(body["key"], "applied")]
    [entry] = await s.audit()
    assert (entry["id"], entry["detail"]["outcome"]) == (body["audit_id"], "uncertain")
    assert "jira failed (500)" in entry["detail"]["error"]
    await nothing_written_ahead(s.db_url)  # no resume and no sweep has anything to send it again from
    # A 5xx before it applied looks the same from here: uncertain too, and not resent either.
    await s.standins.fault("jira", "500", operation="add_comment")
    again = (await s.client.post(CALLS, json=COMMENT)).json()
    assert (again["ok"], again["uncertain"]) == (False, True)
    assert [(w["key"], w["effect"]) for w in await s.comments()] == [
        (body["key"], "applied"), (again["key"], "refused"),
    ]  # fmt: skip


async def test_a_call_the_vendor_refused_is_an_error_not_uncertain(s: Site) -> None:
    await s.grant("jira_transition")
    move = {"tool": "jira_transition", "args": {"issue_key": "OPS-42", "transition": "Nowhere"}}
    answer = await s.client.post(CALLS, json=move)
    assert answer.status_code == 200
    body = answer.json()
    assert (body["ok"], body["uncertain"]) == (False, False)
    assert "no transition 'Nowhere'" in body["error"]
    [entry] = await s.audit()
    assert entry["detail"]["outcome"] == "error"
    assert await s.standins.writes(vendor="jira", operation="transition") == []


async def test_a_requester_that_hangs_up_leaves_the_call_made_and_audited(s: Site) -> None:
    await s.grant("jira_add_comment")
    await s.standins.fault("jira", "stall", stall_s=1.0, operation="add_comment")
    with pytest.raises(httpx.ReadTimeout):
        await s.client.post(CALLS, json=COMMENT, timeout=0.2)

    async def audited() -> bool:
        return bool(await s.audit())

    await eventually(audited, what="the outcome's audit row")
    [started] = await s.audit("inspector.call.started")
    [made] = await s.audit()
    assert made["detail"]["key"] == started["detail"]["key"]
    assert made["detail"]["outcome"] == "ok"
    assert [(w["key"], w["effect"]) for w in await s.comments()] == [(made["detail"]["key"], "applied")]
