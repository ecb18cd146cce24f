"""I15: a decision always wakes its run; an approval decides exactly the call it was filed for; a call
sent again on resume passes the approval gate as it stands now."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.support.crash import HeldCall, eventually, kill_driver, lapse, reaches
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.standins import Standins
from ticketiq.engine.step_keys import approval_key
from ticketiq.leader.sweep import Sweeper
from ticketiq.process import AppProcess

WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write", "probe_keyed"]}


async def test_a_decision_made_before_the_run_could_wait_is_picked_up(db_url: str, tmp_path: Path) -> None:
    # A person decides the instant the request is filed, before the run's suspending statement: the
    # wake-up that decision sent found the run still running. The run must not end waiting for good.
    await read_rows(
        db_url,
        "CREATE FUNCTION decide_at_once() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "UPDATE approvals SET status = 'approved', decided_by = 'quick', decided_at = now() WHERE id = NEW.id; "
        "RETURN NULL; END $$; "
        "CREATE TRIGGER decide_at_once AFTER INSERT ON approvals FOR EACH ROW EXECUTE FUNCTION decide_at_once()",
    )
    async with engine_under_test(db_url, tmp_path, {"a": [WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False) as h:  # fmt: skip
        run_id = await h.run("a")
        assert await h.engine.start(run_id)
        assert await reaches(db_url, run_id, "succeeded", "failed", timeout_s=30) == "succeeded"
    approval = (await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", run_id))[0]["id"]
    assert [w["key"] for w in h.probe.writes()] == [approval_key(str(approval))]


async def test_the_sweep_wakes_a_run_left_waiting_with_every_request_decided(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False) as h:  # fmt: skip
        run = await h.finish(await h.run("a"))
        run_id = str(run["id"])
        assert run["status"] == "waiting"
        # Decided, and its wake-up lost (the deciding process died before it started the run).
        await read_rows(
            db_url, "UPDATE approvals SET status = 'approved', decided_by = 'bob' WHERE run_id = %s", run_id
        )
        await Sweeper(h.engine, db_url).sweep_once(lapsed=True)
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
    assert len(h.probe.writes()) == 1


async def test_an_approval_decides_exactly_the_call_it_was_filed_for(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False) as h:  # fmt: skip
        run_id = str((await h.finish(await h.run("a", "look at OPS-5")))["id"])
        # The request a person approves is one for other arguments at the same place (another call).
        await read_rows(
            db_url,
            "UPDATE approvals SET args = '{\"note\": \"OPS-6\"}', binding = 'another-call', status = 'approved', "
            "decided_by = 'bob' WHERE run_id = %s",
            run_id,
        )
        assert await h.engine.start(run_id)
        assert await reaches(db_url, run_id, "waiting", "succeeded", "failed") == "waiting"
    assert h.probe.writes() == []  # that approval did not send this call
    rows = await read_rows(db_url, "SELECT status, args FROM approvals WHERE run_id = %s ORDER BY created_at", run_id)
    assert [(r["status"], r["args"]) for r in rows] == [("approved", {"note": "OPS-6"}), ("pending", {"note": "OPS-5"})]


@contextlib.asynccontextmanager
async def a_keyed_write_in_doubt(db_url: str, tmp_path: Path) -> AsyncIterator[tuple[Harness, str]]:
    """A run whose keyed write reached the vendor and whose process then died: the write is in doubt."""
    held = HeldCall("keyed")
    async with engine_under_test(db_url, tmp_path, {"k": [KEYED, DONE]}, {"k": TOOLS}, probe=held.probe,
                                 lead=False) as h:  # fmt: skip
        run_id = await h.run("k")
        assert await h.engine.start(run_id)
        await held.at_vendor()
        await kill_driver(h.engine, run_id)
        await lapse(db_url, run_id)
        try:
            yield h, run_id
        finally:
            held.released.set()


async def test_a_keyed_resend_on_resume_passes_the_approval_gate_as_it_stands_now(db_url: str, tmp_path: Path) -> None:
    async with a_keyed_write_in_doubt(db_url, tmp_path) as (h, run_id):
        # The tool now needs a person's approval: the resend is held, not sent.
        await read_rows(db_url, "INSERT INTO tool_policies (tool, needs_approval) VALUES ('probe_keyed', true)")
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "waiting"
        assert len(h.probe.writes()) == 1  # only the original, in doubt
        resumed = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
        )
        assert [(c["route"], c["happened"]) for c in resumed[0]["detail"]["calls"]] == [
            ("resent_same_key", "approval_filed")
        ]
        [pending] = await h.engine.approvals("pending", 10)
        await h.engine.decide_approval(pending.id, True, "bob", None)
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
    keys = [w["key"] for w in h.probe.writes()]
    assert len(keys) == 2 and keys[0] == keys[1]  # resent once, with the same key, after the approval


async def test_a_resend_the_gate_now_refuses_is_not_sent_and_says_so(db_url: str, tmp_path: Path) -> None:
    async with a_keyed_write_in_doubt(db_url, tmp_path) as (h, run_id):
        await read_rows(db_url, "UPDATE grants SET revoked = true WHERE tool = 'probe_keyed'")
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
    assert len(h.probe.writes()) == 1
    rows = await read_rows(db_url, "SELECT settlement, outcome::text AS o FROM calls WHERE run_id = %s", run_id)
    assert rows[0]["settlement"] == "refused"
    assert "not sent again" in rows[0]["o"] and "may not use tool probe_keyed" in rows[0]["o"]
    resumed = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    assert resumed[0]["detail"]["calls"][0]["happened"] == "refused"


async def test_a_write_read_back_and_not_there_needs_the_approval_the_tool_now_requires(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    # The comment is refused once with 429 (not taken) and the process dies while it waits to retry:
    # marked in doubt, never landed.
    await standins.fault("jira", "429", retry_after_s=3.0, operation="add_comment")
    settings = standins.settings(home=tmp_path, seal_keys="t:approvals", call_concurrency=1, lead=False,
                                 write_budget_s=4.0)  # fmt: skip
    process = await AppProcess.start(settings)
    try:
        agent = process.engine.deps.catalog.get("triage")
        assert agent is not None
        run_id = (await process.engine.create_run(agent, "Triage OPS-911: checkout fails")).id
        assert await process.engine.start(run_id)

        async def refused_once() -> bool:
            return bool(await standins.writes(vendor="jira", operation="add_comment"))

        await eventually(refused_once)
        await kill_driver(process.engine, run_id)
        await read_rows(db_url, "INSERT INTO tool_policies (tool, needs_approval) VALUES ('jira_add_comment', true)")
        await lapse(db_url, run_id)
        assert await Sweeper(process.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(process.engine.tasks[run_id], 30) == "waiting"
        assert [w["effect"] for w in await standins.writes(vendor="jira", operation="add_comment")] == ["refused"]
        [pending] = await process.engine.approvals("pending", 10)
        assert pending.tool == "jira_add_comment"
        await process.engine.decide_approval(pending.id, True, "bob", None)
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
    finally:
        await process.stop()
    effects = [w["effect"] for w in await standins.writes(vendor="jira", operation="add_comment")]
    assert effects == ["refused", "applied"]  # sent once, after the approval
    rows = await read_rows(db_url, "SELECT tool, settlement FROM calls WHERE run_id = %s", run_id)
    happened = {r["tool"]: r["settlement"] for r in rows}
    assert happened["jira_add_comment"] == "sent_once"
