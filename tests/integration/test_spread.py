"""Claimed and started runs spread over the live processes (migration 012).

On real Postgres with real liveness marks: a claim gives each run to the least loaded live process in
its one statement (I5), that process takes it up once under the attempt it was given (I3), and a run
given to a process that dies before it takes it up is claimed again. Then with real `ticketiq serve`
processes: a killed process's runs are driven by every survivor, a fresh process gets the next cron
fire's run, and a run given to a process that dies before taking it up is finished once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_sweeps import lost_runs
from tests.integration.test_timeouts import until
from tests.support.cluster import Cluster
from ticketiq.leader.liveness import Liveness
from ticketiq.storage.database import Database
from ticketiq.storage.run_store import RunStore


@dataclass
class Mark:
    """A live process as the database sees it: it holds its liveness mark and listens for runs given
    to it (`heard`: how often it was told)."""

    liveness: Liveness
    heard: int = 0
    lost: list[str] = field(default_factory=list)

    def told(self) -> None:
        self.heard += 1


Marks = Callable[..., Awaitable[dict[str, Mark]]]


@pytest.fixture
async def marks(db: Database) -> AsyncIterator[Marks]:
    held: list[Mark] = []

    async def register(*names: str) -> dict[str, Mark]:
        out = {}
        for name in names:
            # Polled each second, so a heartbeat may take 4 s (heartbeat_within): at 0.1 s it had 1 s, and on
            # two cores busy with five other workers one took longer, the mark let go, and a live process
            # counted as dead got no runs (12 runs went 8 and 4 where three processes each get 4). A run
            # given to a mark wakes it on the same connection at once, whatever the poll.
            mark = Mark(Liveness(db.url, 1.0, on_lost=lambda why: None))
            mark.liveness.on_lost = mark.lost.append
            mark.liveness.on_handed = mark.told
            await mark.liveness.register(name)
            mark.liveness.start()
            held.append(mark)
            out[name] = mark
        return out

    try:
        yield register
    finally:
        for mark in held:
            await mark.liveness.stop(db)
    # What the test judged assumed every mark held all along; a mark lost says the test, not the claim, failed.
    assert [(m.liveness.holder, m.lost) for m in held if m.lost] == []


async def sql(db: Database, text: str, *params: Any) -> list[dict[str, Any]]:
    async with db.pool.connection() as conn:
        cur = await conn.execute(text, params)
        return await cur.fetchall() if cur.description else []


async def dead_process(db: Database, name: str) -> None:
    """A process row whose liveness lock nobody holds: its process died."""
    await sql(db, "INSERT INTO processes (id, lock_key, pid, host) VALUES (%s, nextval('process_lock_keys'), 1, 'h')",
              name)  # fmt: skip


async def queued_run(db: Database) -> str:
    run_id = str(uuid.uuid4())
    await sql(db, "INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status) "
                  "VALUES (%s, 'a', 'x', 'o', 't', 'cron', false, %s, 'queued')", run_id, run_id)  # fmt: skip
    await sql(db, "INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, "
                  "sealed_losses) VALUES (%s, 0, 0, '{}', 's', 'k', 0, 0)", run_id)  # fmt: skip
    return run_id


async def leases(db: Database) -> dict[str, dict[str, Any]]:
    rows = await sql(db, "SELECT substr(l.name, 12) AS run_id, l.holder, l.handed_why, l.handed_attempt, "
                         "l.expires_at, c.attempt, c.losses FROM leases l "
                         "JOIN checkpoints c ON c.run_id = substr(l.name, 12)::uuid")  # fmt: skip
    return {r["run_id"]: r for r in rows}


# ----- the claim: one statement gives each run to the least loaded live process ------------------------


async def test_a_dead_processes_runs_are_spread_over_the_live_processes_each_claimed_once(
    db: Database, marks: Marks
) -> None:
    live = await marks("a-leader", "b-worker", "c-worker")
    await dead_process(db, "d-dead")
    ids = await lost_runs(db, 12, "d-dead", lapsed=False)
    given = await RunStore(db).claim_dead("a-leader", 8.0, ())
    assert sorted(g.run_id for g in given) == sorted(ids)  # each once
    assert Counter(g.holder for g in given) == {"a-leader": 4, "b-worker": 4, "c-worker": 4}
    held = await leases(db)
    for g in given:
        lease = held[g.run_id]
        assert lease["holder"] == g.holder and (lease["attempt"], lease["losses"]) == (2, 1)  # one loss
        # The claimer drives its own at once; the others are marked given under the new attempt.
        expect = (None, None) if g.holder == "a-leader" else ("dead", 2)
        assert (lease["handed_why"], lease["handed_attempt"]) == expect
    # Each process given runs is told on its liveness connection; the claimer is not.
    await until(lambda: live["b-worker"].heard > 0 and live["c-worker"].heard > 0, "the workers being told")
    assert live["a-leader"].heard == 0
    assert await RunStore(db).claim_dead("a-leader", 8.0, ()) == []


async def test_the_least_loaded_process_gets_runs_first_and_a_stalled_one_gets_none(db: Database, marks: Marks) -> None:
    await marks("a-leader", "b-busy", "c-fresh", "s-stalled")
    await lost_runs(db, 3, "a-leader", lapsed=False)
    await lost_runs(db, 2, "b-busy", lapsed=False)
    await lost_runs(db, 1, "s-stalled", lapsed=True)  # its renewals stopped: it is given nothing
    await dead_process(db, "d-dead")
    await lost_runs(db, 5, "d-dead", lapsed=False)
    given = await RunStore(db).claim_dead("a-leader", 8.0, ())
    # Filled from the least loaded up: c 0 -> 3, b 2 -> 3; at level 3 the others before the claimer (it
    # has the sweeps to run), the newest first: c.
    assert Counter(g.holder for g in given) == {"c-fresh": 4, "b-busy": 1}


async def test_a_run_the_leader_starts_goes_to_a_fresh_process_which_takes_it_up_once(
    db: Database, marks: Marks
) -> None:
    await marks("a-leader", "b-busy", "c-fresh")
    await lost_runs(db, 2, "a-leader", lapsed=False)
    await lost_runs(db, 1, "b-busy", lapsed=False)
    run_id = await queued_run(db)  # an orphaned queued run, or a cron fire's
    store = RunStore(db)
    given = await store.hand(run_id, "a-leader", 8.0)
    assert given is not None and given.holder == "c-fresh" and given.why == "acquired"
    assert await store.hand(run_id, "a-leader", 8.0) is None  # taken: no second take
    before = (await leases(db))[run_id]
    assert (before["handed_why"], before["handed_attempt"], before["losses"]) == ("acquired", 1, 0)
    # Only the process it was given to takes it up, once, under the attempt it was given.
    assert await store.take_up("b-busy", 8.0, ()) == []
    [taken] = await store.take_up("c-fresh", 8.0, ())
    assert (taken.run_id, taken.attempt, taken.why, taken.losses) == (run_id, 1, "acquired", 0)
    assert await store.take_up("c-fresh", 8.0, ()) == []
    after = (await leases(db))[run_id]
    assert after["handed_why"] is None and after["expires_at"] >= before["expires_at"]  # renewed
    # The next start goes to the least loaded again: now a tie of b and c (1 each) below a (2).
    other = await store.hand(await queued_run(db), "a-leader", 8.0)
    assert other is not None and other.holder in ("b-busy", "c-fresh")


async def test_a_run_a_driver_of_the_process_still_drives_is_taken_up_only_after(db: Database, marks: Marks) -> None:
    await marks("a-leader", "b-worker")
    await dead_process(db, "d-dead")
    ids = await lost_runs(db, 2, "d-dead", lapsed=False)
    given = await RunStore(db).claim_dead("a-leader", 8.0, ())
    mine = [g.run_id for g in given if g.holder == "b-worker"]
    assert len(mine) == 1 and set(ids) >= set(mine)
    assert await RunStore(db).take_up("b-worker", 8.0, mine) == []  # one driver per run per process
    assert [c.run_id for c in await RunStore(db).take_up("b-worker", 8.0, ())] == mine


async def test_a_run_given_to_a_process_that_dies_before_taking_it_up_is_claimed_again(
    db: Database, marks: Marks
) -> None:
    live = await marks("a-leader", "b-doomed", "c-worker")
    await dead_process(db, "d-dead")
    await lost_runs(db, 6, "d-dead", lapsed=False)
    store = RunStore(db)
    first = await store.claim_dead("a-leader", 8.0, ())
    doomed = sorted(g.run_id for g in first if g.holder == "b-doomed")
    assert len(doomed) == 2
    await live["b-doomed"].liveness.release()  # killed: its mark is free, it took nothing up
    while (await sql(db, "SELECT process_alive('b-doomed') AS alive"))[0]["alive"]:
        await asyncio.sleep(0.01)  # the server lets the lock go once it saw the connection close
    again = await store.claim_dead("a-leader", 8.0, ())
    assert sorted(g.run_id for g in again) == doomed  # claimed once more, nothing else
    assert {g.holder for g in again} <= {"a-leader", "c-worker"}
    assert {(g.attempt, g.losses) for g in again} == {(3, 2)}
    # The dead identity can take nothing up (fenced: not its lease, nor its attempt any more).
    assert await store.take_up("b-doomed", 8.0, ()) == []
    taken = await store.take_up("c-worker", 8.0, ())
    assert {c.run_id for c in taken} == {g.run_id for g in first + again if g.holder == "c-worker"}
    assert {c.why for c in taken} == {"dead"}


async def test_a_given_lease_not_taken_up_lapses_and_goes_to_a_process_that_keeps_its_leases(
    db: Database, marks: Marks
) -> None:
    await marks("a-leader", "b-stalled", "c-worker")
    await dead_process(db, "d-dead")
    await lost_runs(db, 3, "d-dead", lapsed=False)
    store = RunStore(db)
    first = await store.claim_dead("a-leader", 8.0, ())
    stuck = [g.run_id for g in first if g.holder == "b-stalled"]
    assert stuck
    await sql(db, "UPDATE leases SET expires_at = now() - interval '1 s' WHERE holder = 'b-stalled'")
    again = await store.claim_lapsed("a-leader", 8.0, 100, ())
    assert sorted(g.run_id for g in again) == sorted(stuck)
    assert "b-stalled" not in {g.holder for g in again}  # it holds a lapsed lease: given nothing
    assert await store.take_up("b-stalled", 8.0, ()) == []  # a lapsed given lease is not taken up


async def test_a_process_stopping_cleanly_is_given_nothing_and_gives_back_what_it_did_not_take_up(
    db: Database, marks: Marks
) -> None:
    await marks("a-leader", "b-stopping")
    await dead_process(db, "d-dead")
    await lost_runs(db, 4, "d-dead", lapsed=False)
    store = RunStore(db)
    first = await store.claim_dead("a-leader", 8.0, ())
    back = sorted(g.run_id for g in first if g.holder == "b-stopping")
    assert back
    assert sorted(await store.drain("b-stopping")) == back
    held = await leases(db)
    assert not set(back) & set(held)  # their leases went, under the attempt they were given by
    rows = await sql(db, "SELECT status, count(*) AS n FROM runs WHERE id = ANY(%s::uuid[]) GROUP BY 1", back)
    assert rows == [{"status": "queued", "n": len(back)}]
    # The sweep gives them out again, not to the stopping process, and counts no second loss.
    for run_id in back:
        given = await store.hand(run_id, "a-leader", 8.0)
        assert given is not None and given.holder == "a-leader" and given.losses == 1


async def test_a_process_stopping_cleanly_hands_its_runs_to_another_never_to_itself(db: Database, marks: Marks) -> None:
    # b-busy drives two runs; a-stopping none: by load alone a-stopping would get the next run.
    await marks("a-stopping", "b-busy")
    await lost_runs(db, 2, "b-busy", lapsed=False)
    store = RunStore(db)
    assert await store.drain("a-stopping") == []
    given = await store.hand(await queued_run(db), "a-stopping", 8.0)
    assert given is not None and given.holder == "b-busy" and given.why == "acquired"
    # With no other live process the run stays queued, for the sweep of whichever process comes next.
    await sql(db, "UPDATE processes SET draining_at = now() WHERE id = 'b-busy'")
    left = await queued_run(db)
    assert await store.hand(left, "a-stopping", 8.0) is None
    assert left not in await leases(db)
    assert await sql(db, "SELECT status FROM runs WHERE id = %s", left) == [{"status": "queued"}]


# ----- real processes -----------------------------------------------------------------------------------


@pytest.fixture
def slow_cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(db_url, tmp_path, standin_args=("--model-latency-ms", "700")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def holders(cluster: Cluster) -> dict[str, int]:
    """Each process identity's pid."""
    return {r["id"]: r["pid"] for r in cluster.rows("SELECT id, pid FROM processes")}


def resumed_by(cluster: Cluster, run_id: str) -> list[int]:
    """The pids whose attempt resumed the run (I8: one audit row per resume)."""
    pids = holders(cluster)
    return [pids[r["actor"]] for r in cluster.rows(
        "SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id)]  # fmt: skip


def post_in_flight(cluster: Cluster, app: Any, first: int, n: int, *more: tuple[Any, int]) -> dict[int, str]:
    """`n` triage runs posted to `app` (tickets from `first` on), and `n` more to each app of `more` from its
    own first ticket; returned once every one of them is in flight (posted all before waiting for any, so
    that on a slow machine the first are not near their end when the last begin)."""
    asked = [(app, first), *more]
    runs = {k: cluster.post_run(to, "triage", f"Triage OPS-{k}: spread") for to, start in asked
            for k in range(start, start + n)}  # fmt: skip
    cluster.wait_until(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), 60, "every run in flight")
    return runs


def finished_once(cluster: Cluster, runs: dict[int, str]) -> None:
    """Each run succeeded once; each ticket got one incident and one comment; one Teams reply each."""
    for run_id in runs.values():
        run = cluster.wait_run(run_id, timeout_s=90)
        assert run["status"] == "succeeded", cluster.logs()
        assert len(cluster.audit(run_id, "agent.run.succeeded")) == 1
    incidents = [w for w in cluster.writes(vendor="incidentio") if w["effect"] == "applied"]
    for k in runs:
        assert len([w for w in incidents if f"OPS-{k}:" in str(w["body"])]) == 1, incidents
        assert len([w for w in cluster.writes(vendor="jira", target=f"OPS-{k}") if w["effect"] == "applied"]) == 1


@pytest.mark.long
def test_with_three_processes_a_killed_ones_runs_are_driven_by_every_survivor_and_a_fresh_one_gets_the_next_fire(
    slow_cluster: Cluster,
) -> None:
    cluster = slow_cluster
    leader = cluster.app("leader", lead=True)
    worker = cluster.app("worker", lead=False)
    victim = cluster.app("victim", lead=False)
    runs = post_in_flight(cluster, victim, 1100, 8)
    os.kill(victim.pid, signal.SIGKILL)
    finished_once(cluster, runs)
    drivers = Counter(pid for run_id in runs.values() for pid in resumed_by(cluster, run_id))
    assert sum(drivers.values()) == len(runs)  # each run resumed once (I5, I8)
    assert set(drivers) == {leader.pid, worker.pid}, drivers  # every survivor drives some
    assert max(drivers.values()) < len(runs)  # none all of them
    assert {cluster.run(r)["losses"] for r in runs.values()} == {1}

    # A fresh process, while the others are busy, gets the next cron fire's run.
    fresh = cluster.app("fresh", lead=False)
    busy = post_in_flight(cluster, leader, 1200, 2, (worker, 1210))
    schedule = str(uuid.uuid4())
    cluster.rows("INSERT INTO schedules (id, agent, cron, timezone, input, next_fire_at, created_by) "
                 "VALUES (%s, 'reader', '* * * * *', 'UTC', 'Read OPS-1300', date_trunc('minute', now()), 'test')",
                 schedule)  # fmt: skip
    fired = "SELECT run_id FROM schedule_fires WHERE schedule_id = %s AND run_id IS NOT NULL"
    cluster.wait_until(lambda: bool(cluster.rows(fired, schedule)), 30, "the fire's run")
    [fire] = cluster.rows(fired, schedule)
    run = cluster.wait_run(str(fire["run_id"]))
    assert run["status"] == "succeeded"
    actors = {r["actor"] for r in cluster.rows(
        "SELECT actor FROM audit_log WHERE run_id = %s AND action IN ('agent.run.answered', 'agent.run.succeeded')",
        fire["run_id"])}  # fmt: skip
    assert {holders(cluster)[a] for a in actors} == {fresh.pid}, cluster.logs()
    finished_once(cluster, busy)


def test_a_run_given_to_a_process_that_dies_before_taking_it_up_is_finished_once(slow_cluster: Cluster) -> None:
    cluster = slow_cluster
    leader = cluster.app("leader", lead=True)
    doomed = cluster.app("doomed", lead=False)
    victim = cluster.app("victim", lead=False)
    runs = post_in_flight(cluster, victim, 1400, 6)
    os.kill(doomed.pid, signal.SIGSTOP)  # alive to the database (its mark is held), but takes nothing up
    os.kill(victim.pid, signal.SIGKILL)
    [doomed_id] = [i for i, pid in holders(cluster).items() if pid == doomed.pid]
    cluster.wait_until(
        lambda: bool(cluster.rows("SELECT 1 FROM leases WHERE holder = %s AND handed_why = 'dead'", doomed_id)),
        30, "runs given to the stopped process",
    )  # fmt: skip
    untaken = "SELECT substr(name, 12) AS id FROM leases WHERE holder = %s AND handed_why IS NOT NULL"
    given = {str(r["id"]) for r in cluster.rows(untaken, doomed_id)}
    assert given and given < set(runs.values())
    os.kill(doomed.pid, signal.SIGKILL)  # dies before it took them up
    finished_once(cluster, runs)
    for run_id in runs.values():
        assert resumed_by(cluster, run_id) == [leader.pid]  # one resume each, by the leader alone
        assert cluster.run(run_id)["losses"] == (2 if run_id in given else 1)


async def test_the_liveness_mark_hears_only_runs_given_to_its_own_identity(db: Database, marks: Marks) -> None:
    live = await marks("a-leader", "b-worker")
    await sql(db, "SELECT pg_notify('ticketiq_handed', 'someone-else')")
    await sql(db, "SELECT pg_notify('ticketiq_handed', 'b-worker')")
    await until(lambda: live["b-worker"].heard == 1, "b-worker being told")
    await asyncio.sleep(0.2)
    assert live["a-leader"].heard == 0
