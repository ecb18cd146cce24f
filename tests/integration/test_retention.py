"""The retention pass (issue 34) on the real Postgres: what it purges, what it never purges, its fence, two
passes at once, and a dry run."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState
from a2a.utils.errors import TaskNotFoundError

from tests.integration.test_api import until
from tests.support.a2a_rig import a2a, message, send
from tests.support.ended_runs import fill
from tests.support.engine import engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.leader.retention import LeadershipLost, RetentionPass, exporter_for
from ticketiq.settings import Settings
from ticketiq.storage.database import Database
from ticketiq.values.retention import Policy

SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "a": [{"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}, {"text": "answered {jira_key}"}],
    "asker": [
        {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]},
        {"text": "noted {jira_key}"},
    ],
}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": ["probe_read"]}, "asker": {"tools": []}}
KEEP_S = 2.0


@asynccontextmanager
async def serving_api(db_url: str, tmp: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A process (its own retention pass left to the test: it runs hourly) and a client of its API as an admin."""
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, retention_every=3600.0) as h:
        token = await h.token("ops", "admin")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,  # fmt: skip
        ):
            yield client


async def naming(db_url: str, run_ids: list[str]) -> dict[str, int]:
    """Every table with a run_id column (and runs by id): how many of its rows name one of `run_ids`."""
    tables = await read_rows(db_url, "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                                     "AND column_name = 'run_id' AND table_name IN (SELECT table_name FROM "
                                     "information_schema.tables WHERE table_type = 'BASE TABLE')")  # fmt: skip
    found = {}
    for t in [r["table_name"] for r in tables] + ["runs"]:
        column = "id" if t == "runs" else "run_id"
        rows = await read_rows(db_url, f"SELECT count(*) AS n FROM {t} WHERE {column} = ANY(%s::uuid[])", run_ids)
        found[t] = rows[0]["n"]
    return found


def a_pass(db: Database, leader: str | None = None, batch: int = 1000, keep_s: float = KEEP_S) -> RetentionPass:
    policy = Policy(runs_s=keep_s, audit_s=0, jobs_s=0, keys_s=86400, batch=batch)
    return RetentionPass(db, policy, "test-pass", leader=leader)


async def test_a_pass_purges_ended_runs_with_every_row_naming_them_and_keeps_held_and_waiting_ones(
    db_url: str, tmp_path: Path, db: Database
) -> None:
    async with serving_api(db_url, tmp_path) as client:
        ids = [(await client.post("/v1/runs", json={"agent": "a", "input": f"check OPS-{n}"})).json()["id"]
               for n in range(6)]  # fmt: skip
        asking = (await client.post("/v1/runs", json={"agent": "asker", "input": "deploy OPS-9",
                                                      "may_wait": True})).json()["id"]  # fmt: skip
        for run_id in ids:
            await until(client, run_id, "succeeded")
        waiting = await until(client, asking, "waiting")
        held = ids[0]
        assert (await client.post(f"/v1/runs/{held}/hold", json={"reason": "legal"})).status_code == 200
        await asyncio.sleep(KEEP_S + 0.5)

        dry = await a_pass(db).run(dry_run=True)
        assert dry.deleted["runs"] == 5 and dry.deleted["checkpoints"] == 5
        assert (await client.get(f"/v1/runs/{ids[1]}")).status_code == 200  # a dry run deletes nothing

        done = await a_pass(db).run()
        assert done.deleted == dry.deleted
        assert done.deleted["runs"] == 5 and done.deleted["calls"] == 5 and done.deleted["run_attempts"] == 5
        for run_id in ids[1:]:
            for path in ("", "/transcript", "/timeline", "/events"):
                answered = await client.get(f"/v1/runs/{run_id}{path}")
                assert answered.status_code == 404, (path, answered.text)
        assert set((await naming(db_url, ids[1:])).values()) == {0}
        # The audit outlives the runs on its own clock, no longer naming them by run_id.
        kept = await read_rows(db_url, "SELECT count(*) AS n FROM audit_log WHERE detail->>'purged_run' = ANY(%s)",
                               ids[1:])  # fmt: skip
        assert kept[0]["n"] >= 10
        # The held run and the waiting one keep every row.
        assert (await naming(db_url, [held]))["checkpoints"] == 1
        assert (await naming(db_url, [asking]))["checkpoints"] == 1
        question = waiting["waiting_for"]["question_id"]
        given = await client.post(f"/v1/runs/{asking}/input", json={"text": "prod", "question_id": question})
        assert given.status_code == 202, given.text
        assert (await until(client, asking, "succeeded", "failed"))["status"] == "succeeded"

        # Released, the next pass purges it too.
        assert (await client.request("DELETE", f"/v1/runs/{held}/hold")).status_code == 200
        again = await a_pass(db).run()
        assert again.deleted["runs"] == 1
        assert (await client.get(f"/v1/runs/{held}")).status_code == 404
    passes = await read_rows(db_url, "SELECT dry_run, deleted->>'runs' AS runs, error FROM retention_passes "
                                     "WHERE process = 'test-pass' ORDER BY id")  # fmt: skip
    assert passes == [{"dry_run": True, "runs": "5", "error": None}, {"dry_run": False, "runs": "5", "error": None},
                      {"dry_run": False, "runs": "1", "error": None}]  # fmt: skip


async def test_a_pass_whose_process_no_longer_leads_deletes_nothing_and_stops(db_url: str, db: Database) -> None:
    await fill(db_url, 30, ago_s=60)
    await read_rows(db_url, "INSERT INTO leases (name, holder, expires_at) VALUES ('leader', 'p-1', now() + "
                            "interval '1 minute') RETURNING name")  # fmt: skip
    with pytest.raises(LeadershipLost):
        await a_pass(db, leader="p-2").run()
    assert (await read_rows(db_url, "SELECT count(*) AS n FROM runs"))[0]["n"] == 30
    # The lease lapsed: its holder leads no more either.
    await read_rows(db_url, "UPDATE leases SET expires_at = now() - interval '1 s' WHERE name = 'leader' "
                            "RETURNING name")  # fmt: skip
    with pytest.raises(LeadershipLost):
        await a_pass(db, leader="p-1").run()
    await read_rows(db_url, "UPDATE leases SET expires_at = now() + interval '1 minute' RETURNING name")
    assert (await a_pass(db, leader="p-1").run()).deleted["runs"] == 30
    stopped = await read_rows(db_url, "SELECT error FROM retention_passes WHERE error IS NOT NULL")
    assert len(stopped) == 2 and all("no longer leads" in s["error"] for s in stopped)


async def test_two_passes_at_once_delete_each_row_once_and_neither_fails(db_url: str, db: Database) -> None:
    await fill(db_url, 2_500, ago_s=60)
    first, second = await asyncio.gather(a_pass(db, batch=200).run(), a_pass(db, batch=200).run())
    assert first.deleted["runs"] + second.deleted["runs"] == 2_500
    assert first.deleted["calls"] + second.deleted["calls"] == 7_500
    assert first.error is None and second.error is None
    left = await read_rows(db_url, "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM calls) AS calls, "
                                   "(SELECT count(*) FROM audit_log WHERE run_id IS NOT NULL) AS audit")  # fmt: skip
    assert left == [{"runs": 0, "calls": 0, "audit": 0}]


async def test_what_is_still_alive_is_never_purged(db_url: str, db: Database) -> None:
    await fill(db_url, 6, ago_s=60)
    runs = [r["id"] for r in await read_rows(db_url, "SELECT id::text FROM runs ORDER BY finished_at")]
    young, answer_due, child, parent, in_workflow, policy_past = runs
    await read_rows(db_url, "UPDATE runs SET finished_at = now() WHERE id = %s RETURNING id", young)
    # A kept answer still to be handed on (I12), inside its TTL.
    await read_rows(db_url, "UPDATE answers SET handed_on_at = NULL WHERE run_id = %s RETURNING run_id", answer_due)
    # A held child keeps its parent; the parent goes once the child has.
    await read_rows(db_url, "UPDATE runs SET parent_run_id = %s, held_at = now() WHERE id = %s RETURNING id",
                    parent, child)  # fmt: skip
    # A run a workflow that has not ended names.
    await read_rows(db_url, "WITH j AS (INSERT INTO jobs (id, kind, resumable, status, created_by, holder, attempt) "
                            "VALUES (gen_random_uuid(), 'workflow', true, 'running', 'ops', 'p', 1) RETURNING id) "
                            "INSERT INTO workflow_steps (job_id, seq, step_id, kind, key, status, run_id, attempt) "
                            "SELECT id, 1, 's1', 'agent', 'k', 'running', %s, 1 FROM j RETURNING job_id",
                    in_workflow)  # fmt: skip
    assert (await a_pass(db, keep_s=30).run()).deleted["runs"] == 1
    left = {r["id"] for r in await read_rows(db_url, "SELECT id::text FROM runs")}
    assert left == {young, answer_due, child, parent, in_workflow} and policy_past not in left

    # Each let go: the child's hold released, the answer handed on, the workflow ended.
    await read_rows(db_url, "UPDATE runs SET held_at = NULL WHERE id = %s RETURNING id", child)
    await read_rows(db_url, "UPDATE answers SET handed_on_at = now() WHERE run_id = %s RETURNING run_id", answer_due)
    await read_rows(db_url, "UPDATE jobs SET status = 'succeeded', finished_at = now() RETURNING id")
    gone = await a_pass(db, keep_s=30).run()
    assert (
        gone.deleted["runs"] == 3 and gone.deleted["workflow_steps_unlinked"] == 1
    )  # the child, answer_due, in_workflow
    assert (await a_pass(db, keep_s=30).run()).deleted["runs"] == 1  # the parent, its child gone
    assert [r["id"] for r in await read_rows(db_url, "SELECT id::text FROM runs")] == [young]


async def test_a_policy_of_zero_keeps_for_ever_and_the_short_lived_rows_follow_their_rules(
    db_url: str, db: Database
) -> None:
    await fill(db_url, 3, ago_s=86400 * 400)
    await read_rows(db_url, "UPDATE answers SET kept_until = now() - interval '1 s' WHERE run_id = "
                            "(SELECT min(id::text)::uuid FROM runs) RETURNING run_id")  # fmt: skip
    await read_rows(
        db_url,
        "INSERT INTO processes (id, lock_key, pid, host, ended_at) VALUES "
        "('gone', nextval('process_lock_keys'), 1, 'h', now() - interval '2 days'), "
        "('recent', nextval('process_lock_keys'), 1, 'h', now() - interval '1 hour') RETURNING id",
    )
    forever = RetentionPass(db, Policy(runs_s=0, audit_s=0, jobs_s=0, keys_s=86400, batch=100), "test-pass")
    report: Any = await forever.run()
    assert report.deleted.get("runs", 0) == 0 and report.deleted.get("audit_log", 0) == 0
    assert report.deleted["answers"] == 1 and report.deleted["processes"] == 1
    assert [r["id"] for r in await read_rows(db_url, "SELECT id FROM processes")] == ["recent"]
    audit_only = RetentionPass(db, Policy(runs_s=0, audit_s=86400, jobs_s=0, keys_s=86400, batch=4), "test-pass")
    assert (await audit_only.run()).deleted["audit_log"] == 6  # in batches of 4: its own clock, the runs kept
    assert (await read_rows(db_url, "SELECT count(*) AS n FROM runs"))[0]["n"] == 3


async def test_a_purged_a2a_task_is_not_found_as_the_protocol_says(db_url: str, tmp_path: Path, db: Database) -> None:
    async with a2a(db_url, tmp_path, retention_every=3600.0) as s, s.client() as client:
        task = await send(client, message("check OPS-1", "m-1"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        await asyncio.sleep(0.3)
        assert (await a_pass(db, keep_s=0.1).run()).deleted["a2a_tasks"] == 1
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id))


async def test_the_export_is_written_and_fsynced_before_its_runs_are_deleted(
    db_url: str, tmp_path: Path, db: Database
) -> None:
    await fill(db_url, 25, ago_s=60)
    folder = tmp_path / "exported"
    policy = Policy(runs_s=30, audit_s=0, jobs_s=0, keys_s=86400, batch=10)

    async def broken(ids: list[str]) -> tuple[str | None, list[str]]:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        await RetentionPass(db, policy, "test-pass", exporter=broken).run()
    assert (await read_rows(db_url, "SELECT count(*) AS n FROM runs"))[0]["n"] == 25  # nothing deleted

    settings = Settings(database_url=db_url, retention_export_dir=folder)
    done = await RetentionPass(db, policy, "test-pass", exporter=exporter_for(db, settings)).run()
    assert done.deleted["runs"] == 25 and len(done.exported) == 3  # batches of 10, 10 and 5
    lines = []
    for path in done.exported:
        with gzip.open(path, "rt") as written:
            lines += [json.loads(line) for line in written]
    assert len(lines) == 25 and {line["run"]["status"] for line in lines} == {"succeeded"}
    assert {"run", "timeline", "transcript", "writes"} <= set(lines[0])
    assert sorted(p.name for p in folder.iterdir()) == sorted(Path(p).name for p in done.exported)  # no temp left
    assert (await read_rows(db_url, "SELECT count(*) AS n FROM runs"))[0]["n"] == 0


async def test_an_idempotency_key_that_pointed_at_a_purged_run_goes_with_it(
    db_url: str, tmp_path: Path, db: Database
) -> None:
    async with serving_api(db_url, tmp_path) as client:
        asking = (await client.post("/v1/runs", json={"agent": "asker", "input": "deploy OPS-9",
                                                      "may_wait": True})).json()["id"]  # fmt: skip
        waiting = await until(client, asking, "waiting")
        given = await client.post(f"/v1/runs/{asking}/input", json={"text": "prod"},
                                  headers={"Idempotency-Key": "input-1"})  # fmt: skip
        assert given.status_code == 202, given.text
        await until(client, asking, "succeeded")
        keys = await read_rows(db_url, "SELECT run_id::text FROM idempotency_keys WHERE key = 'input-1'")
        assert keys == [{"run_id": asking}] and waiting["status"] == "waiting"
        await asyncio.sleep(KEEP_S + 0.5)
        assert (await a_pass(db).run()).deleted["idempotency_keys"] == 1
    assert await read_rows(db_url, "SELECT key FROM idempotency_keys") == []


async def test_the_leader_runs_the_pass_every_interval_fenced_by_its_lease(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, retention_every=0.5, retention_runs=0.5) as h:
        made = await h.engine.submit("a", "check OPS-4", may_wait=False, channel="api", actor="ops")
        passes: list[dict[str, Any]] = []
        for _ in range(200):  # until the pass that purged it has recorded so
            passes = await read_rows(
                db_url, "SELECT process, error FROM retention_passes WHERE (deleted->>'runs')::int = 1"
            )
            if passes:
                break
            await asyncio.sleep(0.1)
        assert passes == [{"process": h.process.engine.deps.holder, "error": None}]
        assert (await read_rows(db_url, "SELECT count(*) AS n FROM runs WHERE id = %s", made.id))[0]["n"] == 0
        scraped = h.process.engine.deps.metrics.render(lease_lapses=0)
        assert 'ticketiq_retention_deleted_total{table="runs"} 1.0' in scraped
        assert "ticketiq_retention_oldest_seconds" in scraped and "ticketiq_retention_pass_seconds_count" in scraped
