"""Teams turns: an activity from the durable inbox becomes a run, and the run's answer a reply, posted once.

Receiving (`TeamsTurns.receive`, called by `POST /v1/teams/messages` once the activity's Bot Framework
token verified): the activity is stored in the inbox, deduplicated on its id and on its content within
TICKETIQ_TEAMS_DEDUPE_S (`teams_inbox.intake`), then its run is made on the `teams` channel (may not
wait; TICKETIQ_TEAMS_AGENT; acting as the Teams user) and started, and the route acknowledges: nothing
waits for the turn.

The row is claimed under a lease by way of its run's lease. The run is made with an idempotency key
derived from the conversation and activity id (`teams_inbox.run_key`), which is also the row's link to
it: every delivery of the activity finds the one run, and so does the reply. A process that dies with a
turn in flight leaves its run's lease to lapse; the leader claims it once and the run adopts its
checkpoint (I5, I6, I13; with TICKETIQ_CRASH_RESUME_ENTRIES false it is failed, the reason naming the
setting), and the row is thereby handed back. A process that dies after storing the row and before
making its run leaves a row with no run: a redelivery of the activity, or the leader after
TICKETIQ_QUEUED_GRACE_S (`adopt_unstarted`), makes it (the same key: one run however many try).

Replying (`hand_on`, the `teams` channel's hand-on, registered by the process): once the run's answer
is kept (I12), the reply is a write the engine makes itself (`teams_hand_on`, a step of its own at
index REPLY_IDX of the run's last step) through the call maker, with every write's guarantees: marked
in doubt before it is sent (I2), its outcome recorded; after a takeover its row is routed like any call
a step left (`resume.plan`): done, reused; in doubt, read back through Graph once it can no longer be in
flight (I14) and posted only if absent (I9). An Adaptive card carries the answer and the run's link.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.engine import resume
from ticketiq.engine.calls import UNCERTAIN
from ticketiq.engine.settlement import ToolNow
from ticketiq.engine.state import PlannedCall, RunState
from ticketiq.engine.step_keys import run_call_key
from ticketiq.errors import RequestError
from ticketiq.intake import teams_inbox
from ticketiq.intake.teams_inbox import CHANNEL, Intake, TurnStatus
from ticketiq.storage.teams_store import InboxRow, ReplyTarget, Seen, TeamsStore
from ticketiq.tools import teams
from ticketiq.tools.base import ToolClass

if TYPE_CHECKING:
    from ticketiq.engine.driver import RunDriver
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)

# The reply's place among the calls of the run's last step: past any a model step asks for, in the same
# step (so the checkpoint chain's rows-after-head check (I17) sees no later step).
REPLY_IDX = 1000
REPLY_SETTLE_TRIES = 3  # the reply made, then settled at most twice more when its outcome is left open
# Its "provider call id": fixed, so its step key derives from the run and step alone (I11).
REPLY_CALL_ID = "ticketiq-teams-reply"
ADOPT_BATCH = 100


class NotConfigured(RequestError):
    """The Teams inbox cannot take activities until a setting is fixed."""

    status = 503


@dataclass(frozen=True)
class Received:
    intake: Intake
    row_id: int | None
    run_id: str | None
    duplicate_of: str | None = None  # the activity id a content duplicate repeats


@dataclass(frozen=True)
class InboxEntry:
    id: int
    activity_id: str
    conversation_id: str
    from_id: str
    from_name: str | None
    text: str
    received_at: Any
    run_id: str | None
    status: TurnStatus
    reason: str | None


class TeamsTurns:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store = TeamsStore(engine.deps.db)

    @property
    def agent(self) -> str:
        return str(self.engine.deps.settings.teams_agent)

    async def receive(self, row: InboxRow) -> Received:
        """Store the activity (unless the inbox holds it or its content already), make its run and start
        it here. NotConfigured, with nothing stored, when TICKETIQ_TEAMS_AGENT names no agent."""
        if self.engine.deps.catalog.get(self.agent) is None:
            raise NotConfigured(
                "settings.TICKETIQ_TEAMS_AGENT", f"TICKETIQ_TEAMS_AGENT names no agent ({self.agent!r})"
            )

        def store_it(seen: Seen | None, duplicate_of: str | None) -> bool:
            return teams_inbox.intake(_facts(seen), duplicate_of) is Intake.NEW

        window = self.engine.deps.settings.teams_dedupe_s
        seen, duplicate_of, row_id = await self.store.receive(row, window, store_it)
        decided = teams_inbox.intake(_facts(seen), duplicate_of) if row_id is None else Intake.NEW
        if decided is Intake.NEW:
            assert row_id is not None
            return Received(decided, row_id, await self._make_run(row_id, row.run_key, row.actor, row.text))
        if decided is Intake.UNSTARTED:
            assert seen is not None
            return Received(decided, seen.row_id, await self._make_run(seen.row_id, row.run_key, row.actor, row.text))
        if decided is Intake.DUPLICATE:
            return Received(decided, None, None, duplicate_of)
        return Received(decided, seen.row_id if seen else None, seen.run_id if seen else None)

    async def adopt_unstarted(self) -> int:
        """The leader's hand-back of rows whose process died before making their run: made, and given to
        the least loaded live process. Returns how many."""
        grace = self.engine.deps.settings.queued_grace_s
        rows = await self.store.unstarted(grace, ADOPT_BATCH)
        for row in rows:
            log.warning("teams inbox row %s has no run %.0f s after it came; making it", row.row_id, grace)
            await self._make_run(row.row_id, row.run_key, row.actor, row.text, spread=True)
        return len(rows)

    async def entries(self, before: int | None, limit: int) -> list[InboxEntry]:
        out = []
        for r in await self.store.listing(before, limit):
            status, reason = teams_inbox.turn_status(r.run_status, r.run_error, r.reply, r.reason)
            out.append(InboxEntry(r.id, r.activity_id, r.conversation_id, r.from_id, r.from_name, r.text,
                                  r.received_at, r.run_id, status, reason))  # fmt: skip
        return out

    async def _make_run(self, row_id: int, key: str, actor: str, text: str, spread: bool = False) -> str | None:
        """The turn's run, made once by its key whoever asks (a delivery, a redelivery, the leader), and
        started here unless another process has it; with `spread` (the leader's hand-back) given to the
        least loaded live process instead."""
        try:
            created = await self.engine.submit(
                self.agent, text, may_wait=False, channel=CHANNEL, idempotency_key=key, actor=actor, start=False
            )
        except RequestError as exc:
            # For good (the agent is gone): said on the row, never tried again.
            log.error("teams inbox row %s: no run can be made: %s", row_id, exc.message)
            await self.store.refuse(row_id, f"no run could be made for it: {exc.message}")
            return None
        await self.store.set_run(row_id, created.id)
        await (self.engine.hand(created.id) if spread else self.engine.start(created.id))
        return created.id


def _facts(seen: Seen | None) -> tuple[bool, bool] | None:
    return None if seen is None else (seen.run_id is not None, seen.reason is not None)


# ----- the reply: the `teams` channel's hand-on ---------------------------------------------------------


async def hand_on(driver: RunDriver, answer: str) -> dict[str, Any]:
    """Post the turn's reply once (I2, I9, I12, I14); returns what the hand-on audit records of it."""
    target = await TeamsStore(driver.deps.db).reply_target(driver.run_id)
    if target is None:
        return {"reply": {"posted": False, "reason": "no Teams inbox row holds this run: there is no one to reply to"}}
    base = driver.deps.settings.public_url or target.app_url
    call = reply_call(driver.state, target, answer, f"{base.rstrip('/')}/console/runs/{driver.run_id}")
    readable = target.team_id is not None and teams.graph_thread(target.conversation_id, target.activity_id) is not None

    def tool_now(name: str) -> tuple[ToolNow, ToolClass | None]:
        return ToolNow(exists=True, has_reader=readable, dedupe_window_s=None), ToolClass.WRITE

    # Not marked yet: made now. Marked by an attempt that was lost: settled as any write it left. Sent
    # and answered with an open outcome (a 5xx, no answer): put back in doubt and settled the same way,
    # read back once it can no longer be in flight and sent again only if it is not there (I9, I14), a
    # few times, so a vendor's passing failure does not end the turn without its reply.
    for _ in range(REPLY_SETTLE_TRIES):
        rows = {r.idx: r for r in await driver.handle.calls_for_step(driver.state.step) if r.idx == REPLY_IDX}
        left = resume.plan(driver.run_id, [call], rows, [], tool_now, driver.state.step)
        work = await driver.calls.carry_out(left, await driver.gate_facts(fresh=True))
        if not (readable and left_open(work.results.get(REPLY_IDX))):
            break
        log.warning("run %s: the Teams reply's outcome was left open; reading it back", driver.run_id)
        await driver.handle.reopen_uncertain(driver.state.step, REPLY_IDX, UNCERTAIN)
    happened = work.happened.get(REPLY_IDX)
    detail = teams_inbox.reply_detail(happened.value if happened else None, work.results.get(REPLY_IDX))
    if not detail["posted"]:
        log.warning("run %s: the Teams reply was not posted: %s", driver.run_id, detail["reason"])
    return {"reply": detail}


def left_open(result: Any) -> bool:
    """Whether a write's recorded result says its vendor's answer left its effect open (calls.UNCERTAIN)."""
    return isinstance(result, dict) and result.get("outcome") == UNCERTAIN


def reply_call(state: RunState, target: ReplyTarget, answer: str, run_url: str) -> PlannedCall:
    """The reply as a call of the run's last step; its key derives from the run and the step (I11)."""
    text = answer if len(answer) <= teams.HAND_ON_ANSWER_MAX else _clipped(answer)
    args = {
        "service_url": target.service_url, "conversation_id": target.conversation_id,
        "activity_id": target.activity_id, "team_id": target.team_id, "text": text or "(no answer text)",
        "run_url": run_url,
    }  # fmt: skip
    key = run_call_key(state.correlation_id, state.agent_loop, state.step, REPLY_CALL_ID)
    return PlannedCall(REPLY_IDX, REPLY_CALL_ID, teams.HAND_ON.name, ToolClass.WRITE, args, key)


def _clipped(answer: str) -> str:
    more = "\n\n(clipped: the whole answer is at the run's link)"
    return answer[: teams.HAND_ON_ANSWER_MAX - len(more)] + more


async def adopt_unstarted(engine: Engine) -> None:
    """For the leader's sweep: rows left without a run (never raises; a failure is logged and retried)."""
    try:
        await TeamsTurns(engine).adopt_unstarted()
    except Exception:
        log.exception("teams inbox hand-back failed; trying again at the next sweep")


def install(engine: Engine) -> None:
    """At process start: the Teams reply is the `teams` channel's hand-on (I12)."""
    engine.deps.hand_ons[CHANNEL] = hand_on
