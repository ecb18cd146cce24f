"""The job runtime over the real Postgres, with app processes in the test's event loop and the API on a
real socket (issue 10; I3, I13). The kinds are the small real ones of `tests/support/job_kinds.py`, and a
`Gate` holds a job at an exact count so each test acts at a known point without timing anything.

A process "dies" as a SIGKILL leaves it: its liveness connection is terminated by the server, so it
loses every lease at once (I14) and comes back under a new identity, and the leader's sweep takes its
jobs back.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import job_kinds
from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, kill_liveness, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.storage.job_store import JobStore

SCRIPTS: dict[str, list[dict[str, Any]]] = {"helper": [{"text": "done"}]}
AGENTS: dict[str, dict[str, Any]] = {"helper": {"tools": []}}


@pytest.fixture(autouse=True)
def test_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    job_kinds.register(monkeypatch)


@asynccontextmanager
async def app_process(db_url: str, tmp: Path, name: str = "a", **kw: Any) -> AsyncIterator[Harness]:
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    async with engine_under_test(db_url, folder, SCRIPTS, AGENTS, **kw) as h:
        yield h


@asynccontextmanager
async def api(h: Harness, role: str = "operator", name: str = "ops") -> AsyncIterator[httpx.AsyncClient]:
    token = await h.token(name, role)
    async with (
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        yield client


async def job_row(db_url: str, job_id: str) -> dict[str, Any]:
    return (await read_rows(db_url, "SELECT * FROM jobs WHERE id = %s", job_id))[0]


async def ends(db_url: str, job_id: str, *statuses: str) -> dict[str, Any]:
    async def ended() -> bool:
        return (await job_row(db_url, job_id))["status"] in statuses

    await eventually(ended, 60, f"job {job_id} reaching {statuses}")
    return await job_row(db_url, job_id)


async def post_job(client: httpx.AsyncClient, kind: str, **params: Any) -> dict[str, Any]:
    made = await client.post("/v1/jobs", json={"kind": kind, "params": params})
    assert made.status_code == 201, made.text
    job: dict[str, Any] = made.json()
    return job


async def test_a_job_runs_end_to_end_and_its_progress_is_shown(db_url: str, tmp_path: Path) -> None:
    async with app_process(db_url, tmp_path) as h, api(h) as client:
        made = await post_job(client, "count", to=5)
        assert (made["kind"], made["status"], made["created_by"], made["resumable"]) == ("count", "queued", "ops", True)
        ended = await ends(db_url, made["id"], "succeeded", "failed")
        assert ended["status"] == "succeeded", ended["error"]
        shown = (await client.get(f"/v1/jobs/{made['id']}")).json()
        assert shown["progress"] == {"done": 5, "total": 5, "unit": "steps"}
        assert shown["result"] == {"counted": 5, "resumed_from": 0, "attempt": 1}
        assert (shown["attempts"], shown["losses"], shown["error"]) == (1, 0, None)
        assert shown["finished_at"] is not None and shown["started_at"] is not None
        # The lease went with the job's end.
        assert await read_rows(db_url, "SELECT 1 FROM leases WHERE name = %s", f"job:{made['id']}") == []


def held(prefix: str) -> tuple[str, job_kinds.Gate]:
    """A fresh gate: its name (the job's `gate` param) and the gate."""
    name = f"{prefix}-{uuid.uuid4()}"
    return name, job_kinds.gate(name)


async def test_the_api_lists_filters_audits_and_replays_an_idempotent_create(db_url: str, tmp_path: Path) -> None:
    async with app_process(db_url, tmp_path, job_concurrency=0) as h, api(h) as client:
        key = {"Idempotency-Key": "job-1"}
        body = {"kind": "count", "params": {"to": 3}}
        first = await client.post("/v1/jobs", json=body, headers=key)
        again = await client.post("/v1/jobs", json=body, headers=key)
        assert first.status_code == again.status_code == 201, first.text
        assert again.json() == first.json() and again.headers.get("Idempotent-Replayed") == "true"
        other = await post_job(client, "count_once", to=2)
        listed = (await client.get("/v1/jobs")).json()["jobs"]
        assert [j["id"] for j in listed] == [other["id"], first.json()["id"]]  # newest first, made once
        assert [j["id"] for j in (await client.get("/v1/jobs", params={"kind": "count"})).json()["jobs"]] == [
            first.json()["id"]
        ]
        assert (await client.get("/v1/jobs", params={"status": "running"})).json()["jobs"] == []
        bad = await client.get("/v1/jobs", params={"status": "sleeping"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "status"]
        shown = first.json()
        assert shown["params"] == {"to": 3, "step_ms": 0, "gate": None, "hold_at": None, "fail_at": None}
        assert shown["progress"] == {"done": 0, "total": None, "unit": "steps"}
    audit = await read_rows(db_url, "SELECT action, actor, run_id, detail FROM audit_log WHERE action LIKE 'job.%%'")
    assert [(a["action"], a["actor"], a["run_id"], a["detail"]["kind"]) for a in audit] == [
        ("job.created", "ops", None, "count"), ("job.created", "ops", None, "count_once"),
    ]  # fmt: skip


async def test_a_keyed_create_sent_again_after_its_answer_was_lost_finds_the_job_it_made(
    db_url: str, tmp_path: Path
) -> None:
    # The first request's process made the job and died before the key's answer was stored: the key is
    # taken over and the request made again, which must find that job rather than make a second.
    async with app_process(db_url, tmp_path, job_concurrency=0) as h, api(h) as client:
        made_before = await h.process.jobs.queue.submit("count", {"to": 3}, "ops", key="POST /v1/jobs\njob-2")
        again = await client.post("/v1/jobs", json={"kind": "count", "params": {"to": 3}},
                                  headers={"Idempotency-Key": "job-2"})  # fmt: skip
        assert again.status_code == 201, again.text
        assert again.json()["id"] == made_before.id
        another_key = await client.post("/v1/jobs", json={"kind": "count", "params": {"to": 3}},
                                        headers={"Idempotency-Key": "job-3"})  # fmt: skip
        assert another_key.json()["id"] != made_before.id
    rows = await read_rows(db_url, "SELECT id::text AS id FROM jobs ORDER BY created_at")
    assert [r["id"] for r in rows] == [made_before.id, another_key.json()["id"]]
    audit = await read_rows(db_url, "SELECT count(*) AS n FROM audit_log WHERE action = 'job.created'")
    assert audit[0]["n"] == 2  # made, and audited, once each


async def test_bad_kinds_and_params_are_refused_naming_the_field_and_nothing_is_written(
    db_url: str, tmp_path: Path
) -> None:
    async with app_process(db_url, tmp_path, job_concurrency=0) as h, api(h) as client:
        refused = [
            ({"kind": "nonesuch", "params": {}}, ["body", "kind"]),
            ({"kind": "count_internal", "params": {"to": 3}}, ["body", "kind"]),
            ({"kind": "count", "params": {}}, ["body", "params", "to"]),
            ({"kind": "count", "params": {"to": "many"}}, ["body", "params", "to"]),
            ({"kind": "count", "params": {"to": 3, "colour": "red"}}, ["body", "params", "colour"]),
            ({"kind": "count", "params": [1]}, ["body", "params"]),
            ({"kind": "", "params": {}}, ["body", "kind"]),
            ({"kind": "count", "params": {"to": 3}, "by": "mallory"}, ["body", "by"]),
        ]
        for body, loc in refused:
            response = await client.post("/v1/jobs", json=body)
            assert response.status_code == 422, (body, response.text)
            assert response.json()["detail"][0]["loc"] == loc, body
        unknown = await client.post("/v1/jobs", json={"kind": "nonesuch", "params": {}})
        assert "count" in unknown.json()["detail"][0]["msg"]  # it names the kinds there are
        assert await read_rows(db_url, "SELECT 1 FROM jobs") == []

        missing = str(uuid.uuid4())
        for method, path in (("GET", ""), ("POST", "/cancel"), ("POST", "/restart")):
            response = await client.request(method, f"/v1/jobs/{missing}{path}")
            assert response.status_code == 404, (path, response.text)
            assert response.json()["detail"][0]["loc"] == ["path", "job_id"]

        made = await post_job(client, "count", to=3)
        caller = await h.token("visitor", "caller")
        as_caller = {"Authorization": f"Bearer {caller}"}
        for method, path in (
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs"),
            ("GET", f"/v1/jobs/{made['id']}"),
            ("POST", f"/v1/jobs/{made['id']}/cancel"),
            ("POST", f"/v1/jobs/{made['id']}/restart"),
        ):
            response = await client.request(
                method, path, headers=as_caller, json={"kind": "count", "params": {"to": 1}}
            )
            assert response.status_code == 403, (method, path, response.text)
        assert len(await read_rows(db_url, "SELECT 1 FROM jobs")) == 1
        assert (await job_row(db_url, made["id"]))["status"] == "queued"  # the caller cancelled nothing


async def test_of_two_workers_claiming_at_once_each_job_is_claimed_by_exactly_one(db_url: str, tmp_path: Path) -> None:
    async with (
        app_process(db_url, tmp_path, "a", job_concurrency=0) as a,
        app_process(db_url, tmp_path, "b", job_concurrency=0) as b,
    ):
        made = [await a.process.jobs.queue.submit("count", {"to": 1}, "ops") for _ in range(20)]
        stores = (JobStore(a.process.db), JobStore(b.process.db))
        holders = (a.engine.deps.holder, b.engine.deps.holder)
        taken: list[str] = []
        for _ in range(3):  # three rounds of the race, each worker asking for three jobs at once
            claims = await asyncio.gather(*(s.claim(holder, 8.0, 3) for s, holder in zip(stores, holders, strict=True)))
            assert [len(c) for c in claims] == [3, 3]
            taken += [j.id for c in claims for j in c]
        last = await asyncio.gather(*(s.claim(holder, 8.0, 3) for s, holder in zip(stores, holders, strict=True)))
        taken += [j.id for c in last for j in c]
        assert len(taken) == len(set(taken)) == 20  # every job claimed, none twice
        rows = await read_rows(db_url, "SELECT j.id::text AS id, j.status, j.attempt, j.holder, l.holder AS leased"
                                       " FROM jobs j JOIN leases l ON l.name = 'job:' || j.id::text")  # fmt: skip
        assert sorted(r["id"] for r in rows) == sorted(j.id for j in made)
        assert {(r["status"], r["attempt"]) for r in rows} == {("running", 1)}
        assert all(r["holder"] == r["leased"] and r["holder"] in holders for r in rows)
        assert await stores[0].claim(holders[0], 8.0, 4) == []  # nothing queued is left


async def test_two_live_workers_run_every_job_once(db_url: str, tmp_path: Path) -> None:
    async with app_process(db_url, tmp_path, "a") as a, app_process(db_url, tmp_path, "b") as b, api(a) as client:
        made = [await post_job(client, "count", to=3, step_ms=5) for _ in range(8)]
        for job in made:
            row = await ends(db_url, job["id"], "succeeded", "failed")
            assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 1, 0)
            assert job_kinds.STEPS[job["id"]] == [(1, 1), (1, 2), (1, 3)]  # each step once, one attempt
        holders = {r["holder"] for r in await read_rows(db_url, "SELECT holder FROM jobs")}
        assert holders <= {a.engine.deps.holder, b.engine.deps.holder}


async def test_progress_is_visible_while_the_job_runs(db_url: str, tmp_path: Path) -> None:
    name, gate = held("progress")
    async with app_process(db_url, tmp_path) as h, api(h) as client:
        made = await post_job(client, "count", to=10, gate=name, hold_at=3)
        await asyncio.wait_for(gate.reached.wait(), 30)
        shown = (await client.get(f"/v1/jobs/{made['id']}")).json()
        assert (shown["status"], shown["progress"], shown["attempts"]) == (
            "running", {"done": 3, "total": 10, "unit": "steps"}, 1
        )  # fmt: skip
        assert (await job_row(db_url, made["id"]))["state"] == {"n": 3}
        gate.released.set()
        assert (await ends(db_url, made["id"], "succeeded"))["progress_done"] == 10


async def test_a_job_whose_attempt_was_raised_underneath_writes_nothing_more(db_url: str, tmp_path: Path) -> None:
    """I3: the save waits on the row lock of a concurrent takeover; the takeover raises the attempt and
    commits; the save then matches nothing, the job stops (JobLost) and neither its state, its progress
    nor its end is written."""
    name, gate = held("fence")
    async with app_process(db_url, tmp_path, lead=False) as h, api(h) as client:
        made = await post_job(client, "count", to=8, gate=name, hold_at=4)
        await asyncio.wait_for(gate.reached.wait(), 30)
        async with await psycopg.AsyncConnection.connect(db_url) as takeover, takeover.transaction():
            await takeover.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (made["id"],))
            gate.released.set()  # the job's next save now waits on this lock

            async def save_waits() -> bool:
                rows = await read_rows(db_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                               "AND query LIKE '%%UPDATE jobs%%'")  # fmt: skip
                return bool(rows)

            await eventually(save_waits, 30, "the job's save waiting on the takeover's lock")
            await takeover.execute("UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", (made["id"],))

        await eventually(lambda: _gone(h, made["id"]), 30, "the fenced job stopping")
        row = await job_row(db_url, made["id"])
        assert (row["status"], row["attempt"], row["state"], row["progress_done"]) == ("running", 2, {"n": 4}, 4)
        assert row["finished_at"] is None and row["result"] is None
        assert job_kinds.STEPS[made["id"]] == [(1, n) for n in range(1, 5)]  # nothing after the fence
        assert f"job:{made['id']}" not in h.process.keeper.held  # its lease is no longer renewed


async def _gone(h: Harness, job_id: str) -> bool:
    return job_id not in h.process.jobs.slots


async def test_a_resumable_job_whose_process_died_goes_on_from_its_saved_state(db_url: str, tmp_path: Path) -> None:
    name, gate = held("resume")
    async with (
        app_process(db_url, tmp_path, "a", lead=False) as a,
        app_process(db_url, tmp_path, "b", lead=True) as b,
        api(b) as client,
    ):
        made = await post_job(client, "count", to=8, gate=name, hold_at=4)
        await asyncio.wait_for(gate.reached.wait(), 30)
        runner = (await job_row(db_url, made["id"]))["holder"]
        doomed = a if runner == a.engine.deps.holder else b
        await kill_liveness(db_url, runner)
        row = await ends(db_url, made["id"], "succeeded", "failed")
        assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), row["error"]
        assert row["result"] == {"counted": 8, "resumed_from": 4, "attempt": 2}
        # Each step once: the first attempt's four, then the rest from the saved count.
        assert job_kinds.STEPS[made["id"]] == [(1, n) for n in range(1, 5)] + [(2, n) for n in range(5, 9)]
        # Taken up by a live identity: the survivor, or the doomed one (its mark re-taken, or reborn when the
        # leader had found it dead first); either way the job was lost once and taken back once.
        assert await read_rows(db_url, "SELECT process_alive(%s) AS alive", row["holder"]) == [{"alive": True}]
        assert doomed.engine.admitted.is_set()
        lost = await read_rows(db_url, "SELECT detail FROM audit_log WHERE action = 'job.lost'")
        assert [(d["detail"]["job_id"], d["detail"]["status"], d["detail"]["losses"]) for d in lost] == [
            (made["id"], "queued", 1)
        ]
        assert runner in lost[0]["detail"]["why"]
        shown = (await client.get(f"/v1/jobs/{made['id']}")).json()
        assert (shown["attempts"], shown["losses"], shown["status"]) == (2, 1, "succeeded")


async def test_a_job_that_is_not_resumable_ends_interrupted_and_a_restart_starts_it_again(
    db_url: str, tmp_path: Path
) -> None:
    name, gate = held("interrupt")
    async with (
        app_process(db_url, tmp_path, "a", lead=False),
        app_process(db_url, tmp_path, "b", lead=True) as b,
        api(b) as client,
    ):
        made = await post_job(client, "count_once", to=6, gate=name, hold_at=2)
        assert made["resumable"] is False
        await asyncio.wait_for(gate.reached.wait(), 30)
        runner = (await job_row(db_url, made["id"]))["holder"]
        await kill_liveness(db_url, runner)
        row = await ends(db_url, made["id"], "interrupted", "queued", "succeeded", "failed")
        assert (row["status"], row["losses"], row["attempt"]) == ("interrupted", 1, 1)
        assert row["error"].startswith("interrupted: the process running it stopped (")
        assert runner in row["error"] and f"POST /v1/jobs/{made['id']}/restart" in row["error"]
        assert job_kinds.STEPS[made["id"]] == [(1, 1), (1, 2)]  # never resumed
        assert await read_rows(db_url, "SELECT 1 FROM leases WHERE name = %s", f"job:{made['id']}") == []

        gate.released.set()  # the restarted job passes the gate
        restarted = await client.post(f"/v1/jobs/{made['id']}/restart")
        assert restarted.status_code == 201, restarted.text
        again = restarted.json()
        assert (again["restarted_from"], again["kind"], again["params"]) == (made["id"], "count_once", made["params"])
        ended = await ends(db_url, again["id"], "succeeded", "failed", "interrupted")
        assert ended["result"] == {"counted": 6, "resumed_from": 0, "attempt": 1}  # from scratch
        twice = await client.post(f"/v1/jobs/{made['id']}/restart")
        assert twice.status_code == 409 and again["id"] in twice.json()["detail"][0]["msg"]
        done = await client.post(f"/v1/jobs/{again['id']}/restart")
        assert done.status_code == 409 and done.json()["detail"][0]["loc"] == ["path", "job_id"]
    restarts = await read_rows(db_url, "SELECT actor, detail FROM audit_log WHERE action = 'job.restarted'")
    assert [(r["actor"], r["detail"]["restarted_from"]) for r in restarts] == [("ops", made["id"])]


async def test_cancel_ends_a_queued_job_at_once_and_a_running_one_at_its_next_save(db_url: str, tmp_path: Path) -> None:
    name, gate = held("cancel")
    async with app_process(db_url, tmp_path, "idle", job_concurrency=0) as idle, api(idle) as client:
        queued = await post_job(client, "count", to=3)
        cancelled = await client.post(f"/v1/jobs/{queued['id']}/cancel")
        assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
        assert cancelled.json()["cancel_requested_by"] == "ops"
        again = await client.post(f"/v1/jobs/{queued['id']}/cancel")  # a repeat: answered as it is
        assert again.status_code == 202 and again.json()["status"] == "cancelled"
    async with app_process(db_url, tmp_path, "busy") as busy, api(busy, name="ops2") as client:
        running = await post_job(client, "count", to=8, gate=name, hold_at=3)
        await asyncio.wait_for(gate.reached.wait(), 30)
        asked = await client.post(f"/v1/jobs/{running['id']}/cancel")
        assert asked.status_code == 202 and asked.json()["status"] == "running"
        assert asked.json()["cancel_requested_at"] is not None
        gate.released.set()
        row = await ends(db_url, running["id"], "cancelled", "succeeded")
        assert row["status"] == "cancelled" and row["error"] == "cancelled by ops2 at 4 of 8"
        # Stopped at the save that saw the request: it stored its state, then went no further.
        assert (row["state"], job_kinds.STEPS[running["id"]][-1]) == ({"n": 4}, (1, 3))
        assert await read_rows(db_url, "SELECT 1 FROM leases WHERE name = %s", f"job:{running['id']}") == []
        # The never-claimed job stayed cancelled: no worker took it.
        assert (await job_row(db_url, queued["id"]))["attempt"] == 0
        finished = await post_job(client, "count", to=1)
        await ends(db_url, finished["id"], "succeeded")
        late = await client.post(f"/v1/jobs/{finished['id']}/cancel")
        assert late.status_code == 409 and "succeeded" in late.json()["detail"][0]["msg"]
    audit = await read_rows(
        db_url, "SELECT actor, detail FROM audit_log WHERE action = 'job.cancel_requested' ORDER BY id"
    )
    assert [(a["actor"], a["detail"]["status"]) for a in audit] == [("ops", "cancelled"), ("ops2", "running")]


async def test_a_failing_job_ends_failed_with_its_error(db_url: str, tmp_path: Path) -> None:
    async with app_process(db_url, tmp_path) as h, api(h) as client:
        made = await post_job(client, "count", to=5, fail_at=2)
        row = await ends(db_url, made["id"], "failed", "succeeded")
        assert (row["status"], row["error"], row["state"], row["attempt"]) == (
            "failed",
            "told to fail at 2",
            {"n": 2},
            1,
        )


async def test_a_clean_stop_hands_resumable_jobs_back_and_interrupts_the_others(db_url: str, tmp_path: Path) -> None:
    resume_name, resume_gate = held("stop-resume")
    once_name, once_gate = held("stop-once")
    async with app_process(db_url, tmp_path, "b", job_concurrency=0) as b, api(b) as client:
        async with app_process(db_url, tmp_path, "a", shutdown_grace_s=0.2) as a:
            resumable = await post_job(client, "count", to=6, gate=resume_name, hold_at=3)
            once = await post_job(client, "count_once", to=6, gate=once_name, hold_at=3)
            await asyncio.wait_for(asyncio.gather(resume_gate.reached.wait(), once_gate.reached.wait()), 30)
            stopped = a.engine.deps.holder
        # `a` stopped cleanly: no loss counted, nothing swept.
        back = await job_row(db_url, resumable["id"])
        assert (back["status"], back["losses"], back["state"], back["finished_at"]) == ("queued", 0, {"n": 3}, None)
        gone = await job_row(db_url, once["id"])
        assert (gone["status"], gone["losses"]) == ("interrupted", 0)
        assert gone["error"] == (f"interrupted: the process running it stopped ({stopped} stopped cleanly); "
                                 f"restart it with POST /v1/jobs/{once['id']}/restart")  # fmt: skip
        assert await read_rows(db_url, "SELECT name FROM leases WHERE name LIKE 'job:%%'") == []
        async with app_process(db_url, tmp_path, "c"):
            row = await ends(db_url, resumable["id"], "succeeded", "failed")
            assert (row["attempt"], row["losses"], row["result"]["resumed_from"]) == (2, 0, 3)


async def running_job(db: Any, holder: str, kind: str = "count", resumable: bool = True, losses: int = 0) -> str:
    """A job claimed by `holder` (as its worker would), with `losses` counted before."""
    store = JobStore(db)
    made = await store.create(str(uuid.uuid4()), kind, {"to": 3}, resumable, "ops")
    await read_rows(db.url, "UPDATE jobs SET losses = %s WHERE id = %s", losses, made.id)
    [claimed] = await store.claim(holder, 8.0, 1)
    assert claimed.id == made.id
    return made.id


async def test_the_sweep_takes_back_each_lost_job_once_by_its_kind_and_its_losses(db_url: str, tmp_path: Path) -> None:
    """Jobs of a dead holder (no liveness mark) and of a live one that stopped renewing; a resumable job
    past the loss limit; one a person asked to cancel; a job whose holder lives and renews is left be.
    Two sweeps race: each job is taken back once."""
    async with app_process(db_url, tmp_path, job_concurrency=0, lead=False, job_max_losses=2) as h:
        db = h.process.db
        live = h.engine.deps.holder
        queued_again = await running_job(db, "dead-process")
        interrupted = await running_job(db, "dead-process", "count_once", resumable=False)
        too_often = await running_job(db, "dead-process", losses=2)
        cancelled = await running_job(db, "dead-process")
        await JobStore(db).cancel(cancelled, "ops")
        lapsed = await running_job(db, live)
        await read_rows(
            db_url, "UPDATE leases SET expires_at = now() - interval '1 s' WHERE name = %s", f"job:{lapsed}"
        )
        kept = await running_job(db, live)
        batches = await asyncio.gather(JobStore(db).sweep("sweeper-1", 2, 100), JobStore(db).sweep("sweeper-2", 2, 100))
        swept = [j for batch in batches for j in batch]
        assert sorted(j.id for j in swept) == sorted([queued_again, interrupted, too_often, cancelled, lapsed])
        assert await JobStore(db).sweep("sweeper-1", 2, 100) == []  # nothing is taken back twice
        rows = {
            r["id"]: r
            for r in await read_rows(db_url, "SELECT id::text AS id, status, losses, error, finished_at FROM jobs")
        }
        assert (rows[queued_again]["status"], rows[queued_again]["losses"], rows[queued_again]["finished_at"]) == (
            "queued",
            1,
            None,
        )
        assert rows[interrupted]["status"] == "interrupted"
        assert rows[interrupted]["error"] == ("interrupted: the process running it stopped (dead-process died); "
                                              f"restart it with POST /v1/jobs/{interrupted}/restart")  # fmt: skip
        assert (rows[too_often]["status"], rows[too_often]["losses"]) == ("failed", 3)
        assert rows[too_often]["error"].startswith(
            "lost 3 times (TICKETIQ_JOB_MAX_LOSSES=2), the last because dead-process died"
        )
        assert (rows[cancelled]["status"], rows[cancelled]["error"]) == ("cancelled", "cancelled by ops")
        assert (rows[lapsed]["status"], rows[lapsed]["losses"]) == ("queued", 1)
        assert {j.why for j in swept if j.id == lapsed} == {f"{live} stopped renewing its lease"}
        assert rows[kept]["status"] == "running"
        leases = {r["name"] for r in await read_rows(db_url, "SELECT name FROM leases WHERE name LIKE 'job:%%'")}
        assert leases == {f"job:{kept}"}


async def cli(*args: str, token: str | None) -> tuple[int, str, str]:
    """`ticketiq jobs ...` as a person runs it: a subprocess, its token in TICKETIQ_TOKEN."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    if token is not None:
        env["TICKETIQ_TOKEN"] = token
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ticketiq.cli", "jobs", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(child.communicate(), 120)
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


@pytest.mark.long
async def test_jobs_watch_shows_the_bar_until_the_job_ends_and_exits_by_its_outcome(
    db_url: str, tmp_path: Path
) -> None:
    async with app_process(db_url, tmp_path) as h, api(h) as client:
        token = await h.token("watcher", "operator")
        base = str(client.base_url)
        made = await post_job(client, "count", to=20, step_ms=50)
        code, out, err = await cli("watch", made["id"], "--url", base, "--every", "0.1", token=token)
        assert code == 0, err
        assert "20/20" in out and "steps" in out  # the bar's final state
        assert f"job {made['id']} (count) succeeded: 20 of 20 steps; attempts 1, losses 0" in out

        failing = await post_job(client, "count", to=5, fail_at=1)
        code, out, err = await cli("watch", failing["id"], "--url", base, token=token)
        assert code == 1, err
        assert "failed: 1 of 5 steps" in out and "error: told to fail at 1" in out

        code, out, err = await cli("list", "--url", base, token=token)
        assert code == 0, err
        assert made["id"] in out and failing["id"] in out and "succeeded" in out

        code, out, err = await cli("watch", made["id"], "--url", base, token=None)
        assert code == 2 and "TICKETIQ_TOKEN is not set" in err
        code, out, err = await cli("watch", str(uuid.uuid4()), "--url", base, token=token)
        assert code == 2 and "no job" in err
        code, out, err = await cli("watch", "OPS-1", "--url", base, token=token)
        assert code == 2 and "not a job id" in err
        caller = await h.token("visitor", "caller")
        code, out, err = await cli("watch", made["id"], "--url", base, token=caller)
        assert code == 2 and "refused TICKETIQ_TOKEN (403)" in err


async def test_jobs_claimed_but_never_started_go_back_unstarted_under_their_claims_attempt(
    db_url: str, tmp_path: Path
) -> None:
    async with app_process(db_url, tmp_path, job_concurrency=0, lead=False) as h:
        store = JobStore(h.process.db)
        first = await running_job(h.process.db, h.engine.deps.holder)
        second = await running_job(h.process.db, h.engine.deps.holder)
        await read_rows(db_url, "UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", second)  # taken meanwhile
        assert await store.unclaim([(first, 1), (second, 1)]) == 1
        back = await job_row(db_url, first)
        assert (back["status"], back["attempt"], back["losses"]) == ("queued", 1, 0)
        assert (await job_row(db_url, second))["status"] == "running"  # fenced: not this claim's any more
        assert [r["name"] for r in await read_rows(db_url, "SELECT name FROM leases WHERE name LIKE 'job:%%'")] == [
            f"job:{second}"
        ]
        [again] = await store.claim(h.engine.deps.holder, 8.0, 5)
        assert (again.id, again.attempt) == (first, 2)
