"""An approval follows its run (issue 32, finding 7): a run that ends while a call of it waits for a person
withdraws that request in the statement that ends it, audited; deciding a withdrawn request answers 409
with the reason in the API, the CLI and the console, and nothing is sent. Before, a stopped run's request
stayed pending in the queue, and approving it said "the run goes on with the call" while nothing was.

Each statement that ends a run is shown on its own (a request decided before it is left as it was), then
each way a run really ends with a request held: a Stop of the waiting run, a gate that fails it when a
decision wakes it, a checkpoint that fails verification then."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.integration.test_console import csrf_of
from tests.support.crash import reaches
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.fence_rig import HOLDER, driven_run, sealed, written_now
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.errors import Conflict
from ticketiq.storage.database import Database
from ticketiq.storage.rows import Approval
from ticketiq.storage.run_store import Flush, RunHandle, RunStore, SealedAnswer

WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
# Two writes held in one step: a decision on one wakes the run while the other still waits.
TWO: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "first {jira_key}"}},
                                 {"tool": "probe_write", "arguments": {"note": "second {jira_key}"}}]}  # fmt: skip
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
SCRIPTS = {"a": [WRITE, DONE], "two": [TWO, DONE]}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": ["probe_write"]}, "two": {"tools": ["probe_write"]}}
ANSWER = SealedAnswer("done with OPS-1", "answer-seal", "k1", 3600.0)
TERMINAL = ("succeeded", "failed", "interrupted", "stopped")


def request(idx: int) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "step": 1, "idx": idx, "tool": "probe_write", "args": {"note": f"n{idx}"},
            "step_key": f"tqkey{idx}", "binding": f"binding-{idx}"}  # fmt: skip


async def decided_and_pending(db: Database, handle: RunHandle) -> tuple[Approval, Approval]:
    """Two requests of the run's step: the first approved by bob, the second still pending."""
    first, second = await handle.file_approval(request(0)), await handle.file_approval(request(1))
    assert await RunStore(db).decide(first.id, "approved", "bob", "fine") is not None
    return first, second


async def ended_by_end(db: Database, h: RunHandle) -> None:
    await h.end(sealed(1), Flush(), "failed", None, "refused by the containment gate: agent a is quarantined", HOLDER)


async def ended_by_fail(db: Database, h: RunHandle) -> None:
    await h.fail("the checkpoint failed verification", "agent.run.checkpoint_rejected", HOLDER)


async def ended_by_hand_on(db: Database, h: RunHandle) -> None:
    await h.answered(sealed(1), Flush(), ANSWER, HOLDER)
    await h.hand_on(ANSWER.text, [], HOLDER, {"channel": "api"})


async def ended_by_stop_idle(db: Database, h: RunHandle) -> None:
    assert await h.suspend(sealed(1), Flush(), [], HOLDER) is True  # it waits for the pending request
    assert await RunStore(db).request_stop(h.run_id, "ops") is not None


ENDINGS: dict[str, tuple[Callable[[Database, RunHandle], Awaitable[None]], str, str]] = {
    "runs.end": (ended_by_end, "its run ended (failed): refused by the containment gate: agent a is quarantined",
                 HOLDER),
    "runs.fail": (ended_by_fail, "its run ended (failed): the checkpoint failed verification", HOLDER),
    "runs.hand_on": (ended_by_hand_on, "its run ended (succeeded)", HOLDER),
    "runs.stop_idle": (ended_by_stop_idle, "its run ended (stopped): stopped by ops", "ops"),
}  # fmt: skip


@pytest.mark.parametrize("statement", sorted(ENDINGS))
async def test_the_statement_that_ends_a_run_withdraws_its_pending_request_and_only_that(
    db: Database, db_url: str, statement: str
) -> None:
    end, reason, actor = ENDINGS[statement]
    handle = await driven_run(db)
    first, second = await decided_and_pending(db, handle)
    await end(db, handle)
    rows = await written_now(db_url, handle.run_id)
    assert rows["run"][0]["status"] in TERMINAL
    by_id = {str(a["id"]): a for a in rows["approvals"]}
    assert (by_id[first.id]["status"], by_id[first.id]["decided_by"], by_id[first.id]["reason"]) == (
        "approved", "bob", "fine"
    )  # fmt: skip
    assert (by_id[second.id]["status"], by_id[second.id]["decided_by"], by_id[second.id]["reason"]) == (
        "withdrawn", None, reason
    )  # fmt: skip
    assert by_id[second.id]["decided_at"] is not None
    audit = [(a["action"], a["actor"], a["detail"]) for a in rows["audit"] if a["action"].startswith("approval.")]
    assert audit[-1] == ("approval.withdrawn", actor, {"approval_id": second.id, "tool": "probe_write", "step": 1,
                                                       "idx": 1, "binding": "binding-1", "reason": reason})  # fmt: skip
    assert [a for a, _, _ in audit].count("approval.withdrawn") == 1
    notes = [t["body"] for t in rows["transcript"] if t["kind"] == "approval"]
    assert {"approval_id": second.id, "tool": "probe_write", "status": "withdrawn", "reason": reason} in notes
    # Neither request can be decided now: the statement matches nothing.
    for approval in (first, second):
        assert await RunStore(db).decide(approval.id, "rejected", "carol", "late") is None
    assert await written_now(db_url, handle.run_id) == rows


async def test_a_request_its_run_left_pending_when_it_ended_is_not_decided(db_url: str, tmp_path: Path) -> None:
    """A run the previous release stopped ends without withdrawing (migration 033): its request stays
    pending, and this release refuses to decide it, saying why."""
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, approval=["probe_write"], lead=False) as h:
        handle = await driven_run(h.process.db)
        held = await handle.file_approval(request(0))
        # The previous release's stop_idle: the run stopped, the request left as it was.
        await read_rows(db_url, "UPDATE runs SET status = 'stopped', error = 'stopped by ops', finished_at = now() "
                                "WHERE id = %s", handle.run_id)  # fmt: skip
        with pytest.raises(Conflict, match=f"approval {held.id} can no longer be decided: its run ended \\(stopped\\)"):
            await h.engine.decide_approval(held.id, True, "bob", None)
    rows = await read_rows(db_url, "SELECT status, decided_by FROM approvals WHERE id = %s", held.id)
    assert rows == [{"status": "pending", "decided_by": None}]
    assert h.probe.writes() == []


async def test_a_decision_waits_for_a_stop_in_flight_and_then_finds_its_run_ended(db: Database, db_url: str) -> None:
    """The decision reads the run's row FOR SHARE: a statement ending the run that has not committed yet
    (here the previous release's Stop, which withdraws nothing) is waited for, and then seen."""
    handle = await driven_run(db)
    held = await handle.file_approval(request(0))
    assert await handle.suspend(sealed(1), Flush(), [], HOLDER) is True
    async with await psycopg.AsyncConnection.connect(db_url) as stopping:
        await stopping.execute("UPDATE runs SET status = 'stopped', error = 'stopped by ops', finished_at = now() "
                               "WHERE id = %s", (handle.run_id,))  # fmt: skip
        deciding = asyncio.create_task(RunStore(db).decide(held.id, "approved", "bob", None))
        await until_waiting_on_locks(db_url, deciding)
        await stopping.commit()
    assert await deciding is None
    assert (await written_now(db_url, handle.run_id))["approvals"][0]["status"] == "pending"


async def until_waiting_on_locks(db_url: str, task: asyncio.Task[Any]) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as look:
        while True:
            cur = await look.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND wait_event_type = 'Lock'")  # fmt: skip
            row = await cur.fetchone()
            if row is not None and row[0] >= 1:
                return
            if task.done():
                raise AssertionError(f"the decision did not wait for the Stop: {task.result()!r}")
            await asyncio.sleep(0.01)


# ----- the ways a run ends with a request held, through the API, the CLI and the console ----------------


@dataclass
class Served:
    h: Harness
    db_url: str
    base: str
    token: str
    api: httpx.AsyncClient

    async def waiting(self, agent: str) -> tuple[str, list[str]]:
        """A run of `agent` waiting for approval; its run id and its requests' ids, in call order."""
        made = await self.api.post("/v1/runs", json={"agent": agent, "input": "look at OPS-9"})
        run_id = str(made.json()["id"])
        assert await reaches(self.db_url, run_id, "waiting", *TERMINAL) == "waiting"
        rows = await read_rows(self.db_url, "SELECT id FROM approvals WHERE run_id = %s ORDER BY idx", run_id)
        return run_id, [str(r["id"]) for r in rows]


@asynccontextmanager
async def served(db_url: str, tmp: Path) -> AsyncIterator[Served]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"]) as h:
        token = await h.token("ops", "admin")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30,
                              headers={"Authorization": f"Bearer {token}"}) as api,
        ):  # fmt: skip
            yield Served(h, db_url, base, token, api)


async def cli(s: Served, *args: str) -> tuple[int, str, str]:
    """The real CLI in a subprocess (asyncio's: the app it talks to serves on this event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ticketiq.cli", *args, "--url", s.base, "--token", s.token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_approving_the_held_call_of_a_stopped_run_answers_409_and_the_queue_no_longer_lists_it(
    db_url: str, tmp_path: Path
) -> None:
    async with served(db_url, tmp_path) as s:
        run_id, [held] = await s.waiting("a")
        stopped = await s.api.post(f"/v1/runs/{run_id}/stop")
        assert stopped.json()["status"] == "stopped"
        reason = "its run ended (stopped): stopped by ops"
        # The queue, in the API and the CLI, no longer lists it; the withdrawn ones do, with the reason.
        assert held not in {a["id"] for a in (await s.api.get("/v1/approvals")).json()["approvals"]}
        [shown] = [a for a in (await s.api.get("/v1/approvals", params={"status": "withdrawn"})).json()["approvals"]
                   if a["id"] == held]  # fmt: skip
        assert (shown["status"], shown["reason"], shown["decided_by"]) == ("withdrawn", reason, None)
        code, out, err = await cli(s, "approvals", "list")
        assert code == 0 and held not in out and "no pending approvals" in out, (out, err)
        # Deciding it: 409 with the reason, in the API and the CLI (exit 1), either decision.
        for decision in ("approve", "reject"):
            refused = await s.api.post(f"/v1/approvals/{held}", json={"decision": decision, "reason": "late"})
            assert refused.status_code == 409, refused.text
            [detail] = refused.json()["detail"]
            assert detail["loc"] == ["path", "approval_id"]
            assert detail["msg"] == f"approval {held} was withdrawn, so nothing was decided: {reason}"
        code, out, err = await cli(s, "approvals", "approve", held)
        assert code == 1, (out, err)
        assert f"(409): path.approval_id: approval {held} was withdrawn, so nothing was decided: {reason}" in err
        assert "goes on" not in out + err
        run = (await s.api.get(f"/v1/runs/{run_id}")).json()
        assert (run["status"], run["waiting_for"]) == ("stopped", None)
    assert s.h.probe.writes() == []  # nothing was sent
    audit = await read_rows(db_url, "SELECT action, actor FROM audit_log WHERE run_id = %s AND action LIKE "
                                    "'approval.%%' ORDER BY id", run_id)  # fmt: skip
    assert [(a["action"], a["actor"]) for a in audit] == [("approval.withdrawn", "ops")]


async def test_the_console_lists_a_withdrawn_request_as_such_and_deciding_it_shows_the_reason(
    db_url: str, tmp_path: Path
) -> None:
    async with served(db_url, tmp_path) as s, httpx.AsyncClient(verify=TLS, base_url=s.base, timeout=30) as page:
        run_id, [held] = await s.waiting("a")
        form = await page.get("/console/login")
        assert (await page.post("/console/login", data={"csrf": csrf_of(form), "token": s.token})).status_code == 303
        queue = await page.get("/console/approvals")
        assert f'data-approval="{held}"' in queue.text  # pending, before the Stop
        await s.api.post(f"/v1/runs/{run_id}/stop")
        # The decision a person sends from the queue they loaded before the Stop.
        refused = await page.post(f"/console/approvals/{held}", data={"csrf": csrf_of(queue), "decision": "approve",
                                                                      "back": "/console/approvals"})  # fmt: skip
        assert refused.status_code == 409, refused.text
        said = f"approval {held} was withdrawn, so nothing was decided: its run ended (stopped): stopped by ops"
        assert f"<code>path.approval_id</code>: {said}" in refused.text
        assert f'data-approval="{held}"' not in refused.text and "Approved" not in refused.text
        withdrawn = await page.get("/console/approvals?status=withdrawn")
        assert f'data-approval="{held}"' in withdrawn.text and "its run ended (stopped)" in withdrawn.text
    assert s.h.probe.writes() == []


async def test_a_gate_that_fails_the_woken_run_withdraws_the_request_still_held(db_url: str, tmp_path: Path) -> None:
    async with served(db_url, tmp_path) as s:
        run_id, [first, second] = await s.waiting("two")
        assert (await s.api.put("/v1/gates/quarantines/agent/two", json={"reason": "under review"})).status_code < 300
        approved = await s.api.post(f"/v1/approvals/{first}", json={"decision": "approve"})
        assert approved.status_code == 200, approved.text  # it wakes the run, which the gate fails at once
        assert await reaches(db_url, run_id, *TERMINAL) == "failed"
        said = "its run ended (failed): refused by the containment gate: agent two is quarantined: under review"
        refused = await s.api.post(f"/v1/approvals/{second}", json={"decision": "approve"})
        assert refused.status_code == 409 and refused.json()["detail"][0]["msg"].endswith(said), refused.text
    rows = await read_rows(db_url, "SELECT status, reason FROM approvals WHERE run_id = %s ORDER BY idx", run_id)
    assert [(r["status"], r["reason"]) for r in rows] == [("approved", None), ("withdrawn", said)]
    assert s.h.probe.writes() == []


async def test_a_checkpoint_that_fails_verification_on_waking_withdraws_the_request_still_held(
    db_url: str, tmp_path: Path
) -> None:
    async with served(db_url, tmp_path) as s:
        run_id, [first, second] = await s.waiting("two")
        await read_rows(db_url, "UPDATE checkpoints SET seal = 'tampered' WHERE run_id = %s", run_id)
        assert (await s.api.post(f"/v1/approvals/{first}", json={"decision": "approve"})).status_code == 200
        assert await reaches(db_url, run_id, *TERMINAL) == "failed"
        refused = await s.api.post(f"/v1/approvals/{second}", json={"decision": "reject", "reason": "no"})
        assert refused.status_code == 409 and "was withdrawn" in refused.text, refused.text
    [run] = await read_rows(db_url, "SELECT error FROM runs WHERE id = %s", run_id)
    rows = await read_rows(db_url, "SELECT status, reason FROM approvals WHERE run_id = %s ORDER BY idx", run_id)
    said = f"its run ended (failed): {run['error']}"
    assert [(r["status"], r["reason"]) for r in rows] == [("approved", None), ("withdrawn", said)]
    assert s.h.probe.writes() == []
