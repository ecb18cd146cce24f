"""Cron triggers: schedules made, listed, deleted and declared; the leader's fire step; the cron hand-on.

How a fire is claimed, and its outcome recorded once (I12, I13):

- The leader looks for due schedules every TICKETIQ_CRON_CHECK_S with one indexed query, and decides
  what each fires (`schedules.plan`: the DST rules and TICKETIQ_CRON_MISSED).
- A fire is one row unique per (schedule, fire time), inserted ON CONFLICT DO NOTHING by the same
  statement that moves the schedule on: of two leaders (a failover, a partition) one inserts it and
  makes its run; the other inserted nothing and does nothing.
- The fire's run is made with the idempotency key derived from the fire (`run_keys.cron`), so a
  leader that died between recording the fire and making its run is replaced by one that makes the
  same run, never a second (the next check finds the fire without a run); the fire records the run's
  id, and the run is given to the least loaded live process (`Engine.hand`): a fresh process gets it
  first, the leader drives it only when that is the leader.
- I19: the key is in the `cron` namespace, which no API caller can reach; a run found under it that
  the fire did not make (not a `cron` run of the schedule's agent made by `schedule:<id>`: a row put in
  the database by other means) is refused: the fire fails with the reason, and that run is never
  linked, handed on or started by it.
- From then on the fire is claimed under the run's own lease: there is one lease, `checkpoint:<run>`,
  fenced by the run's attempt. A process that dies mid-run loses it; the leader claims the run once
  (I5) and it goes on from its checkpoint on the survivor: that is the fire handed back and run again.
  With TICKETIQ_CRASH_RESUME_ENTRIES false the lost run is failed instead, and so is its fire.
- Runs of the `cron` channel hand their answer on as a step of their own (I12): the run is `answered`
  with its answer kept, then `hand_on` below records the answer on the fire with one statement fenced
  by the run's attempt, then the run succeeds. A process that dies in between is replaced by one that
  hands on the kept answer: the hook runs again and finds the outcome recorded, so it is recorded once.
- Whether a fire succeeded or failed is its run's status, read through the fire's run id (the fires
  query joins it). A run fails by many statements (an error, the loss limit, a Stop, the setting
  above); copying each into the fire would put cron into every one of them and let two records
  disagree.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ticketiq.agents.catalog import DeclaredSchedule
from ticketiq.engine import run_keys
from ticketiq.engine.run_keys import Expected
from ticketiq.errors import NotFound, RequestError
from ticketiq.storage.schedule_store import Due, Fire, Schedule, ScheduleStore
from ticketiq.values import schedules
from ticketiq.values.schedules import Cron, Missed

if TYPE_CHECKING:
    from ticketiq.engine.driver import RunDriver
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)

CHANNEL = "cron"
DUE_BATCH = 100
# The namespace of schedule ids derived from a request's Idempotency-Key (uuid5 of the token and the key).
KEYED_SCHEDULES = uuid.UUID("0d7c3f0e-5b8a-4f21-9c64-3e1a7b2d5f90")


def schedule_id(by: str, key: str | None) -> str:
    """A fresh id, or for a keyed request one derived from the token's name and the key: the same
    request, however often sent (a retry after a crash included), names the same schedule (I19)."""
    return str(uuid.uuid4() if key is None else uuid.uuid5(KEYED_SCHEDULES, f"{by}\n{key}"))


def refusal(expression: str, zone: str) -> RequestError | None:
    """Why a schedule's times are refused, naming the field; None when they are good."""
    problem = schedules.cron_problem(expression)
    if problem is not None:
        return RequestError("body.cron", problem)
    problem = schedules.zone_problem(zone)
    if problem is not None:
        return RequestError("body.timezone", problem)
    return None


class Scheduler:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = ScheduleStore(engine.deps.db)

    # ----- what the API asks ---------------------------------------------------------------------

    async def create(
        self, agent: str, expression: str, zone: str, text: str, by: str, key: str | None = None
    ) -> Schedule:
        """A schedule whose first fire is its first time after now (the database clock). `key` (the
        request's Idempotency-Key): the schedule's id derives from it and the token, so a request sent
        again after its process died between making the schedule and keeping the key's answer finds
        that schedule, not a second one firing beside it."""
        if self.engine.deps.catalog.get(agent) is None:
            raise NotFound("body.agent", f"no agent named {agent!r}")
        refused = refusal(expression, zone)
        if refused is not None:
            raise refused
        cron = Cron(expression.strip(), zone)
        now = await self.store.clock()
        schedule, made = await self.store.create({
            "id": schedule_id(by, key), "agent": agent, "cron": cron.expression, "timezone": zone, "input": text,
            "next_fire_at": schedules.next_after(cron, now), "by": by,
        })  # fmt: skip
        asked = (agent, cron.expression, zone, text)
        if not made and (schedule.agent, schedule.cron, schedule.timezone, schedule.input) != asked:
            # The key's kept answer was purged (TICKETIQ_IDEMPOTENCY_TTL_S), then the key sent with another request.
            raise RequestError(
                "header.Idempotency-Key", f"this Idempotency-Key made schedule {schedule.id} for another request"
            )
        return schedule

    async def listed(self) -> list[Schedule]:
        return await self.store.listed()

    async def delete(self, schedule_id: str, by: str) -> Schedule:
        gone = await self.store.delete(schedule_id, by)
        if gone is None:
            raise NotFound("path.schedule_id", f"no schedule {schedule_id}")
        return gone

    async def fires(self, schedule_id: str, limit: int) -> list[Fire]:
        if await self.store.get(schedule_id) is None:
            raise NotFound("path.schedule_id", f"no schedule {schedule_id}")
        return await self.store.fires(schedule_id, limit)

    async def seed(self, declared: Iterable[DeclaredSchedule]) -> None:
        """The agents file's schedules, upserted by name (every process at start; never duplicated)."""
        items = list(declared)
        if not items:
            return
        now = await self.store.clock()
        for d in items:
            cron = Cron(d.cron.strip(), d.timezone)
            seeded = await self.store.seed({
                "id": str(uuid.uuid4()), "name": d.name, "agent": d.agent, "cron": cron.expression,
                "timezone": d.timezone, "input": d.input, "next_fire_at": schedules.next_after(cron, now),
            })  # fmt: skip
            if seeded is not None:
                log.info("schedule %s %s from the agents file", d.name, "declared" if seeded else "updated")

    # ----- the leader's fire step ----------------------------------------------------------------

    async def fire_due(self, now: datetime | None = None) -> list[str]:
        """Fire every due schedule once and make the runs of fires left without one; return the run ids
        made or found. `now`: the database clock unless a test gives one."""
        missed = Missed(self.engine.deps.settings.cron_missed)
        runs: list[str] = []
        for due in await self.store.due(now, DUE_BATCH):
            try:
                if due.kind == "unmade":
                    assert due.fire_at is not None and due.run_key is not None
                    made = await self._make_run(due, due.fire_at, due.run_key)
                else:
                    made = await self._fire(due, missed)
            except Exception:
                # One schedule's failure is not every schedule's: the next check tries it again.
                log.exception("schedule %s: the fire step failed; it is tried again at the next check", due.id)
                continue
            runs += [made] if made else []
        return runs

    async def _fire(self, due: Due, missed: Missed) -> str | None:
        cron = Cron(due.cron, due.timezone)
        plan = schedules.plan(cron, due.next_fire_at, due.now, missed)
        fire_at: datetime | None = None
        reason = None
        if plan.fires:
            fire_at = plan.fires[0]
        elif plan.skipped:
            fire_at = plan.skipped[0]
            reason = (f"missed: not fired within {schedules.ON_TIME_S:g} s of {fire_at:%Y-%m-%d %H:%M} UTC (no "
                      "process was up to fire it), and TICKETIQ_CRON_MISSED is skip")  # fmt: skip
        if plan.dropped:
            log.warning("schedule %s: fire times from %s were missed; only the latest is considered",
                        due.id, due.next_fire_at)  # fmt: skip
        key = run_keys.cron(due.id, fire_at) if fire_at is not None else None
        recorded = await self.store.fire(due.id, plan.next_fire_at, fire_at, key, bool(plan.skipped), reason,
                                         self.engine.deps.holder)  # fmt: skip
        if recorded is None or recorded.skipped:
            return None  # another leader fired it, or nothing to fire
        log.info("schedule %s fires for %s", due.id, recorded.fire_at)
        return await self._make_run(due, recorded.fire_at, recorded.run_key)

    async def _make_run(self, due: Due, fire_at: datetime, run_key: str) -> str | None:
        """The fire's run, made once by its key, recorded on the fire and given to the least loaded live
        process."""
        engine = self.engine
        agent = engine.deps.catalog.get(due.agent)
        if agent is None:
            await self.store.fire_failed(run_key, f"agent {due.agent} is not defined in the agents file")
            log.error("schedule %s: its agent %s is not defined; the fire for %s failed", due.id, due.agent, fire_at)
            return None
        maker = f"schedule:{due.id}"
        created = await engine.create_run(
            agent, due.input, may_wait=False, channel=CHANNEL, idempotency_key=run_key, actor=maker,
            created_by=due.created_by,
        )  # fmt: skip
        foreign = None if created.created else run_keys.foreign(created, Expected(CHANNEL, maker, agent=due.agent))
        if foreign is not None:
            # I19: someone else's run is never linked, handed on or started by a fire.
            await self.store.fire_failed(run_key, f"the fire made no run: {foreign}")
            log.error("schedule %s: the fire for %s made no run: %s", due.id, fire_at, foreign)
            return None
        await self.store.link_run(run_key, created.id)
        # Taken for the least loaded live process; one that has it already keeps it, and a run no process
        # took (this one not admitting) is the sweep's.
        await engine.hand(created.id)
        return created.id

    # ----- the cron hand-on ------------------------------------------------------------------------

    async def hand_on(self, driver: RunDriver, answer: str) -> dict[str, Any]:
        """I12: the fire's outcome, recorded once, fenced by the run's attempt (a takeover raises Fenced
        and the run stops here). Run again by a takeover of an answered run: the first record stands."""
        fire, recorded = await driver.handle.record_fire_outcome(answer)
        if not fire:
            log.warning("run %s: a cron run no schedule fire made; no outcome to record", driver.run_id)
        return {"fire_outcome": "recorded" if recorded else ("kept" if fire else "no fire")}


async def install(engine: Engine) -> Scheduler:
    """In every app process: the cron hand-on registered (I12), the agents file's schedules seeded."""
    scheduler = Scheduler(engine)
    engine.deps.hand_ons[CHANNEL] = scheduler.hand_on
    await scheduler.seed(engine.deps.catalog.schedules)
    return scheduler
