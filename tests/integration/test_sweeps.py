"""Claims on real Postgres: of two sweeps racing, exactly one takes each lease (I5)."""

from __future__ import annotations

import asyncio
import uuid

from tests.support.engine import read_rows
from ticketiq.leader.retention import RetentionPass
from ticketiq.storage.database import Database
from ticketiq.storage.run_store import RunStore
from ticketiq.values.retention import Policy


async def lost_runs(db: Database, n: int, holder: str, lapsed: bool = True) -> list[str]:
    """Runs as a dead process leaves them: running, checkpointed, their leases held by it."""
    ids = [str(uuid.uuid4()) for _ in range(n)]
    async with db.pool.connection() as conn:
        for run_id in ids:
            await conn.execute(
                "INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status) "
                "VALUES (%s, 'a', 'x', 'o', 't', 'api', true, %s, 'running')",
                (run_id, run_id),
            )
            await conn.execute(
                "INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, sealed_losses) "
                "VALUES (%s, 1, 1, '{}', 's', 'k', 1, 0)",
                (run_id,),
            )
            await conn.execute(
                "INSERT INTO leases (name, holder, expires_at) VALUES (%s, %s, now() + %s * interval '1 s')",
                (f"checkpoint:{run_id}", holder, -1 if lapsed else 60),
            )
    return ids


async def claims(db: Database, query: str, holder: str, driving: tuple[str, ...] = ()) -> list[str]:
    store = RunStore(db)
    if query == "leader.claim_dead":
        taken = await store.claim_dead(holder, 8.0, driving)
    else:
        taken = await store.claim_lapsed(holder, 8.0, 100, driving)
    return [c.run_id for c in taken]


async def test_two_sweeps_racing_claim_each_lapsed_lease_exactly_once(db: Database) -> None:
    ids = await lost_runs(db, 60, "dead-process")
    taken: list[str] = []
    for _ in range(5):  # several rounds of two leaders sweeping at the same instant
        a, b = await asyncio.gather(
            claims(db, "leader.claim_lapsed", "leader-a"), claims(db, "leader.claim_lapsed", "leader-b")
        )
        taken += a + b
    assert sorted(taken) == sorted(ids)  # every lapsed lease claimed, none twice
    rows = await db.fetch_all("transcripts.for_run", {"run_id": ids[0], "after": 0, "limit": 10})
    assert rows == []
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT attempt, losses FROM checkpoints")
        # One raise of the attempt and one loss each.
        assert {(r["attempt"], r["losses"]) for r in await cur.fetchall()} == {(2, 1)}


async def test_a_lease_that_is_renewed_is_not_claimed(db: Database) -> None:
    await lost_runs(db, 3, "live-process", lapsed=False)
    assert await claims(db, "leader.claim_lapsed", "leader-a") == []


async def test_a_dead_processes_leases_are_claimed_once_without_waiting_for_the_ttl(db: Database) -> None:
    async with db.pool.connection() as conn:
        # A process row whose liveness lock nobody holds: its process died.
        await conn.execute(
            "INSERT INTO processes (id, lock_key, pid, host) VALUES ('dead-one', nextval('process_lock_keys'), 1, 'h')"
        )
    ids = await lost_runs(db, 20, "dead-one", lapsed=False)
    a, b = await asyncio.gather(
        claims(db, "leader.claim_dead", "leader-a"), claims(db, "leader.claim_dead", "leader-b")
    )
    assert sorted(a + b) == sorted(ids)
    assert a == [] or b == []  # one sweep ended the process and took all of its leases
    assert await claims(db, "leader.claim_dead", "leader-a") == []


async def test_a_live_processes_leases_are_left_alone(db: Database) -> None:
    from ticketiq.leader.liveness import Liveness

    liveness = Liveness(db.url, 0.25, on_lost=lambda why: None)
    await liveness.register("alive-one")
    try:
        await lost_runs(db, 5, "alive-one", lapsed=False)
        assert await claims(db, "leader.claim_dead", "leader-a") == []
    finally:
        await liveness.stop(db)
    # Stopped cleanly: ended, not dead, so its leases wait for their TTL (or a hand-back).
    assert await claims(db, "leader.claim_dead", "leader-a") == []


async def test_rows_of_processes_long_ended_are_pruned_unless_they_still_hold_a_lease(db: Database) -> None:
    async with db.pool.connection() as conn:
        for name, ended_ago_s in (("old-idle", 7200), ("old-holder", 7200), ("recent", 60), ("running", None)):
            await conn.execute(
                "INSERT INTO processes (id, lock_key, pid, host, ended_at) VALUES "
                "(%s, nextval('process_lock_keys'), 1, 'h', now() - %s * interval '1 s')",
                (name, ended_ago_s),
            )
    await lost_runs(db, 1, "old-holder")  # its lease was never claimed: keep who held it
    policy = Policy(runs_s=0, audit_s=0, jobs_s=0, keys_s=86400, batch=100, processes_s=3600)
    assert (await RetentionPass(db, policy, "test").run()).deleted["processes"] == 1
    rows = {r["id"] for r in await read_rows(db.url, "SELECT id FROM processes")}
    assert rows == {"old-holder", "recent", "running"}
    assert (await RetentionPass(db, policy, "test").run()).deleted["processes"] == 0


async def test_a_process_never_claims_back_the_runs_it_still_drives(db: Database) -> None:
    ids = await lost_runs(db, 3, "leader-a")  # its own leases, lapsed: its renewer fell behind
    assert sorted(await claims(db, "leader.claim_lapsed", "leader-a", driving=tuple(ids[:2]))) == [ids[2]]
    assert await claims(db, "leader.claim_lapsed", "leader-a", driving=tuple(ids[:2])) == []


async def test_a_claim_returns_the_lease_expiry_the_last_holder_renewed_to(db: Database) -> None:
    [run_id] = await lost_runs(db, 1, "dead-process")
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT expires_at FROM leases WHERE name = %s", (f"checkpoint:{run_id}",))
        expired = (await cur.fetchone())["expires_at"]  # type: ignore[index]
    [taken] = await RunStore(db).claim_lapsed("leader-a", 8.0, 100, ())
    assert taken.lease_expired_at == expired and taken.why == "lapsed"
    assert (taken.attempt, taken.losses, taken.sealed_attempt) == (2, 1, 1)
