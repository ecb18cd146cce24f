"""A delegation keeps its run's authority (issue 32): a child run starts only when the token that started
the run could start its agent itself, as that token stands at the delegation (migration 032, the
delegation gate). A caller limited to `delegator`, whose model delegates to `writer`, gets no `writer`
run: the call is refused before any child exists, settled `refused`, audited, and the model told why. On
a resume the gate is passed again, as things stand then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from ticketiq.storage.token_store import TokenStore

DELEGATE: dict[str, Any] = {"calls": [{"tool": "delegate_to_agent",
                                       "arguments": {"agent": "writer", "input": "announce {jira_key}"}}]}  # fmt: skip
READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "delegator": [DELEGATE, {"text": "the writer said: {result:delegate_to_agent.answer|nothing}"}],
    "writer": [{"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}, {"text": "wrote {jira_key}"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "delegator": {"tools": ["delegate_to_agent"]},
    "writer": {"tools": ["probe_write"]},
}


async def delegation(db_url: str, run_id: str) -> dict[str, Any]:
    """The delegation call's row, its children and the audit of its refusal."""
    [call] = await read_rows(db_url, "SELECT status, settlement, gate, outcome FROM calls WHERE run_id = %s "
                                     "AND tool = 'delegate_to_agent'", run_id)  # fmt: skip
    children = await read_rows(db_url, "SELECT agent FROM runs WHERE parent_run_id = %s", run_id)
    audit = await read_rows(db_url, "SELECT actor, detail FROM audit_log WHERE run_id = %s "
                                    "AND action = 'agent.delegation.refused'", run_id)  # fmt: skip
    return {"call": call, "children": children, "audit": audit}


@pytest.mark.parametrize("born_taken", [True, False], ids=["born-taken", "queued-then-acquired"])
async def test_a_caller_limited_to_delegator_gets_no_writer_run_through_its_model(
    db_url: str, tmp_path: Path, born_taken: bool
) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
        # The facts the take reads are the first step's: runs.create_taken and runs.acquire read the starter.
        await listening(h)
        await h.token("limited", "caller", ["delegator"])
        run_id = await h.run("delegator", "announce OPS-70", created_by="limited", take=born_taken)
        if not born_taken:
            assert await h.engine.start(run_id)
        run = await wait_ended(h, run_id)
    assert run["status"] == "succeeded"  # the model was told, and answered with what it had
    seen = await delegation(db_url, run_id)
    assert seen["children"] == []  # refused before any child exists
    assert (seen["call"]["settlement"], seen["call"]["gate"]) == ("refused", "refuse")
    reason = ("a delegation starts only what its run's starter may: token limited may not start agent writer; "
              "it may start: delegator")  # fmt: skip
    assert seen["call"]["outcome"] == {"result": {"refused": reason, "gate": "delegation"}}
    assert [a["detail"] for a in seen["audit"]] == [{"step": 1, "idx": 0, "agent": "writer", "reason": reason}]
    assert h.probe.received == []  # the writer's write was never made


async def test_a_caller_that_may_start_writer_gets_its_child(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
        await h.token("both", "caller", ["delegator", "writer"])
        run_id = await h.run("delegator", "announce OPS-71", created_by="both", take=False)
        run = await h.finish(run_id)
        assert run["answer"] == "the writer said: wrote OPS-71"
    seen = await delegation(db_url, run_id)
    assert (seen["children"], seen["call"]["settlement"], seen["audit"]) == ([{"agent": "writer"}], "sent", [])


async def test_on_a_resume_the_delegation_is_gated_as_its_starter_stands_then(db_url: str, tmp_path: Path) -> None:
    """The delegation waits for a person's approval; meanwhile its starter's token is revoked. Approved,
    the run goes on, and the delegation is refused: no child."""
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, approval=["delegate_to_agent"]) as h:
        await listening(h)  # the facts the take after the decision reads are the step's (runs.acquire)
        await h.token("later-revoked", "caller", ["delegator", "writer"])
        run_id = await h.run("delegator", "announce OPS-72", created_by="later-revoked", take=False)
        assert (await h.finish(run_id))["status"] == "waiting"
        assert await TokenStore(h.process.db).revoke("later-revoked", "test") is not None
        [pending] = await h.engine.approvals("pending", 10)
        await h.engine.decide_approval(pending.id, True, "ops", None)
        run = await wait_ended(h, run_id)
    assert run["status"] == "succeeded"
    seen = await delegation(db_url, run_id)
    assert seen["children"] == []
    assert seen["call"]["settlement"] == "refused"
    assert [a["detail"]["reason"] for a in seen["audit"]] == ["token later-revoked that started the run is revoked"]


async def test_a_token_revoked_while_its_run_goes_on_stops_the_next_delegation(db_url: str, tmp_path: Path) -> None:
    """The facts a run holds are read again when a token changes (the gate listener hears it): the step
    after a revocation delegates no more."""
    scripts = {**SCRIPTS, "delegator": [READ, *SCRIPTS["delegator"]]}
    agents = {**AGENTS, "delegator": {"tools": ["probe_read", "delegate_to_agent"]}}
    async with engine_under_test(db_url, tmp_path, scripts, agents, latency_ms=600) as h:
        await listening(h)
        await h.token("revoked-midway", "caller", ["delegator", "writer"])
        run_id = await h.run("delegator", "announce OPS-73", created_by="revoked-midway", take=True)
        assert await TokenStore(h.process.db).revoke("revoked-midway", "test") is not None  # during step 1
        run = await wait_ended(h, run_id)
    assert run["status"] == "succeeded"
    seen = await delegation(db_url, run_id)
    assert (seen["children"], seen["call"]["settlement"]) == ([], "refused")


async def listening(h: Harness) -> None:
    watch = h.engine.deps.gate_watch

    async def connected() -> bool:
        return bool(watch.connected)

    await eventually(connected, what="the gate listener connected")


async def wait_ended(h: Harness, run_id: str) -> dict[str, Any]:
    async def ended() -> bool:
        rows = await read_rows(h.settings.database_url or "", "SELECT status FROM runs WHERE id = %s", run_id)
        return rows[0]["status"] in ("succeeded", "failed", "stopped")

    await eventually(ended, what="the run's end")
    [row] = await read_rows(h.settings.database_url or "", "SELECT status, answer FROM runs WHERE id = %s", run_id)
    return row
