"""GET /v1/runs/{id}/timeline over a real socket, on the real Postgres: times taken where things happened
(each step its own, each write marked, sent and answered in order), the attempts of a run that waited
and of one taken over after its process was lost, with the settlement of the write it left in flight,
and the rights of GET /v1/runs/{id}."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import HeldCall, kill_driver, lapse, reaches
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.engine.step_keys import approval_key
from ticketiq.entries.api import create_app
from ticketiq.leader.sweep import Sweeper

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
AGENTS = {"t": {"tools": ["probe_read", "probe_write", "probe_keyed"]}}


def when(value: str | None) -> datetime:
    assert value is not None
    return datetime.fromisoformat(value)


@asynccontextmanager
async def api(h: Harness, token: str) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        yield client


async def test_a_run_with_a_read_a_write_and_an_approval_shows_each_step_and_call_when_it_happened(
    db_url: str, tmp_path: Path
) -> None:
    scripts = {"t": [READ, WRITE, KEYED, DONE]}
    async with engine_under_test(db_url, tmp_path, scripts, AGENTS, approval=["probe_keyed"], latency_ms=20,
                                 lead=False) as h:  # fmt: skip
        alice = await h.token("alice", "caller", ["t"])
        bob = await h.token("bob", "caller", ["t"])
        ops = await h.token("ops", "operator")
        async with api(h, alice) as client:
            made = await client.post("/v1/runs", json={"agent": "t", "input": "Look at OPS-7"})
            run_id = made.json()["id"]
            await reaches(db_url, run_id, "waiting")
            held = (await client.get(f"/v1/runs/{run_id}/timeline")).json()
            approval = (await read_rows(db_url, "SELECT id::text AS id FROM approvals WHERE run_id = %s", run_id))[0]
            decided = await client.post(f"/v1/approvals/{approval['id']}", json={"decision": "approve"},
                                        headers={"Authorization": f"Bearer {ops}"})  # fmt: skip
            assert decided.status_code == 200, decided.text
            await reaches(db_url, run_id, "succeeded")
            done = await client.get(f"/v1/runs/{run_id}/timeline")
            other = await client.get(f"/v1/runs/{run_id}/timeline", headers={"Authorization": f"Bearer {bob}"})
            operator = await client.get(f"/v1/runs/{run_id}/timeline", headers={"Authorization": f"Bearer {ops}"})
            missing = await client.get("/v1/runs/00000000-0000-0000-0000-000000000000/timeline")
            holder = h.engine.deps.holder

    # While it waited: the held call, its request, and the attempt that ended waiting.
    assert held["run"]["status"] == "waiting"
    assert held["run"]["waiting_for"] == {"kind": "approval", "approval_id": approval["id"], "tool": "probe_keyed",
                                          "question": "approve probe_keyed?"}  # fmt: skip
    waiting_call = held["steps"][2]["calls"][0]
    assert (waiting_call["outcome"], waiting_call["status"], waiting_call["approval_id"]) == ("held", "pending",
                                                                                            approval["id"])  # fmt: skip
    assert held["steps"][2]["ended_at"] is None
    assert [(a["attempt"], a["ended"]) for a in held["attempts"]] == [(1, "waiting")]

    # Once it succeeded: four steps (the last answered in text), each with times of its own.
    assert done.status_code == 200
    body = done.json()
    assert body["run"]["id"] == run_id and body["run"]["status"] == "succeeded"
    steps = body["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    starts = [when(s["started_at"]) for s in steps]
    assert starts == sorted(starts) and len(set(starts)) == 4  # not one flush time for all
    for step in steps:
        assert when(step["ended_at"]) >= when(step["started_at"])
        assert step["model_ms"] > 0
    assert [s["attempt"] for s in steps] == [1, 1, 1, 2]  # the answer came under the attempt the decision woke

    read, write, keyed = (s["calls"][0] for s in steps[:3])
    assert (read["class"], read["outcome"], read["status"], read["marked_at"]) == ("read", "ok", "done", None)
    assert when(read["sent_at"]) <= when(read["outcome_at"])
    assert (write["class"], write["outcome"], write["status"]) == ("write", "ok", "done")
    # The mark committed before the request went out, and the answer came back after (one host: one clock).
    assert when(write["marked_at"]) <= when(write["sent_at"]) <= when(write["outcome_at"])
    assert (keyed["approval_id"], keyed["outcome"]) == (approval["id"], "ok")
    assert keyed["key"] == approval_key(approval["id"])  # I11: an approved call's key is the approval's
    assert when(keyed["marked_at"]) <= when(keyed["sent_at"]) <= when(keyed["outcome_at"])
    assert when(steps[2]["ended_at"]) == when(keyed["outcome_at"])
    assert all(c["settled"] is None for s in steps for c in s["calls"])

    # Two attempts: the first ended waiting for the decision, the second (the same process) finished.
    attempts = body["attempts"]
    assert [(a["attempt"], a["process"], a["ended"]) for a in attempts] == [(1, holder, "waiting"),
                                                                             (2, holder, "finished")]  # fmt: skip
    assert when(attempts[0]["ended_at"]) <= when(attempts[1]["started_at"]) <= when(attempts[1]["ended_at"])
    assert all(a["lost_detected_at"] is None and a["taken_after_s"] is None for a in attempts)

    # The rights of GET /v1/runs/{id}: another caller is told there is no such run; an operator reads it.
    assert other.status_code == 404 and other.json()["detail"][0]["loc"] == ["path", "run_id"]
    assert operator.status_code == 200 and operator.json()["run"]["id"] == run_id
    assert missing.status_code == 404


async def test_a_run_taken_over_after_its_process_was_lost_shows_both_attempts_and_the_settlement(
    db_url: str, tmp_path: Path
) -> None:
    held = HeldCall("keyed")
    scripts = {"t": [READ, KEYED, DONE]}
    async with engine_under_test(db_url, tmp_path, scripts, AGENTS, probe=held.probe, lead=False) as h:
        ops = await h.token("ops", "operator")
        run_id = await h.run("t")
        assert await h.engine.start(run_id)
        await asyncio.wait_for(held.reached.wait(), 30)  # the keyed write is at its vendor: in flight
        lost_process = h.engine.deps.holder
        await kill_driver(h.engine, run_id)  # its process "dies" with the write in flight
        await lapse(db_url, run_id)  # and its lease, held by no live process, lapses
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
        held.released.set()
        async with api(h, ops) as client:
            body = (await client.get(f"/v1/runs/{run_id}/timeline")).json()

    first, second = body["attempts"]
    assert (first["attempt"], first["process"], first["ended"]) == (1, lost_process, "lost")
    assert (second["attempt"], second["process"], second["ended"]) == (2, h.engine.deps.holder, "finished")
    assert when(first["ended_at"]) == when(second["lost_detected_at"])  # the take that found it lost
    assert second["taken_after_s"] is not None and second["taken_after_s"] >= 0
    assert when(second["first_at"]) >= when(second["lost_detected_at"])
    # The write left in flight, resent with its key (its vendor dedupes on it: I9), as the audit says (I8).
    assert second["settled"] == [{"idx": 0, "step": 2, "tool": "probe_keyed", "class": "keyed_write",
                                  "route": "resent_same_key", "happened": "resent_same_key"}]  # fmt: skip
    write = body["steps"][1]["calls"][0]
    assert write["settled"]["by_attempt"] == 2 and write["settled"]["happened"] == "resent_same_key"
    assert (write["status"], write["outcome"]) == ("done", "ok")
    assert when(write["marked_at"]) <= when(write["sent_at"]) <= when(write["outcome_at"])  # the resend's own
    assert [s["attempt"] for s in body["steps"]] == [1, 1, 2]
    assert body["run"]["losses"] == 1 and body["run"]["attempt"] == 2
