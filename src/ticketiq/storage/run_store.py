"""The run store: every statement about a run, behind one module (DESIGN.md, "The run store").

A driver holds a `RunHandle` bound to `(run id, attempt)`. The handle adds the fence to every statement
it makes and turns a statement that matched nothing into `Fenced` in exactly one place (`FencedHandle`,
storage/fenced.py, which a job's handle shares), so the fence (I3) is one piece of code rather than a
habit. Statements that are not a driver's (a run is
created, taken, stopped by a person, an approval decided) are the `RunStore`'s own methods. Both return
typed rows. Nothing else in the package names a query about a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ticketiq.storage.database import Database, Row
from ticketiq.storage.fenced import FencedHandle
from ticketiq.storage.rows import (
    Approval,
    AskedApproval,
    AuditRow,
    CallRecord,
    Checkpoint,
    Created,
    GateFacts,
    GivenInput,
    Input,
    KeptAnswer,
    LeftRun,
    RunRecord,
    RunStatus,
    TranscriptRow,
    Waiting,
    row_as,
)


class Sealed(NamedTuple):
    """A checkpoint ready to be written: its state text exactly as sealed, and what the seal covers
    besides (I17): the step, the attempt writing it, the loss count and the seal it replaces. Immutable
    as a tuple is, and made as one: a frozen dataclass's eight `object.__setattr__` cost every step."""

    step: int
    state: str
    seal: str
    key_id: str
    prev_seal: str | None
    losses: int
    state_format: int  # the formats its writer used (engine/resume.py, versioned checkpoints): what a reader must know
    seal_format: int


@dataclass(frozen=True)
class SealedAnswer:
    """I12: a final answer ready to be kept: its text, its seal, and how long it is kept."""

    text: str
    seal: str
    key_id: str
    ttl_s: float


@dataclass
class Flush:
    """Rows that ride on a statement: finished calls (reads, refusals) and transcript entries."""

    finished: list[dict[str, Any]] = field(default_factory=list)
    entries: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class StopRequested:
    """A Stop taken: the run's agent and channel, and whether it ended the run at once (one no process
    drove); otherwise its driver ends it at its next gate check."""

    agent: str
    channel: str
    ended_now: bool


@dataclass(frozen=True)
class Given(Checkpoint):
    """A run's checkpoint as a take found it, and the process its lease was given to (`holder`): the
    taker, which drives it, or another live process, told to take it up (migration 012)."""

    holder: str = ""


def _checkpoint(row: Row) -> Checkpoint:
    return row_as(Checkpoint, row)


def gate_facts_of(row: Row) -> GateFacts:
    """The gates' facts from a row holding them (runs.gate_facts, or a take that read them)."""
    return GateFacts(
        agent=row["agent"],
        tenant=row["tenant"],
        owner=row["owner"],
        channel=row["channel"],
        may_wait=row["may_wait"],
        agent_quarantine=row["agent_quarantine"],
        tenant_quarantine=row["tenant_quarantine"],
        stopped_by=row["stopped_by"],
        channel_enabled=row["channel_enabled"],
        owner_may_run=row["owner_may_run"],
        granted=frozenset(row["granted"]),
        needs_approval=frozenset(row["needs_approval"]),
        starter=row["starter"],
        starter_role=row["starter_role"],
        starter_agents=None if row["starter_agents"] is None else frozenset(row["starter_agents"]),
        starter_revoked=row["starter_revoked"],
        restored_at=row["restored_at"],  # I24
        restored_from=row["restored_from"],
    )


def _taken(row: Row) -> Checkpoint:
    """A take that read the gates' facts with the run (acquire, create_taken)."""
    return row_as(Checkpoint, row, facts=gate_facts_of(row))


def _given(row: Row) -> Given:
    return row_as(Given, row)


def _call(row: Row) -> CallRecord:
    return CallRecord(
        step=int(row["step"]),
        idx=int(row["idx"]),
        attempt=int(row["attempt"]),
        provider_call_id=str(row["provider_call_id"]),
        tool=str(row["tool"]),
        tool_class=str(row["class"]),
        step_key=row["step_key"],
        sent_key=row["sent_key"],
        args=dict(row["args"] or {}),
        status=str(row["status"]),
        outcome=row["outcome"],
        settlement=row["settlement"],
        in_flight_s=float(row.get("in_flight_s") or 0.0),
        remote_ref=row.get("remote_ref"),
    )


def _kept(answer: SealedAnswer | None) -> dict[str, Any]:
    if answer is None:
        return {"answer": None, "answer_seal": None, "answer_key_id": None, "answer_ttl": 0.0}
    return {"answer": answer.text, "answer_seal": answer.seal, "answer_key_id": answer.key_id,
            "answer_ttl": answer.ttl_s}  # fmt: skip


class RunStore:
    """Statements about runs that no attempt makes: a run created, taken, read, stopped, decided."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def bound(self, run_id: str, attempt: int) -> RunHandle:
        return RunHandle(self.db, run_id, attempt)

    # ----- a run is born ---------------------------------------------------------------------------

    async def create(self, params: dict[str, Any]) -> Created | None:
        """Insert the run with its first sealed checkpoint in one statement; None when its
        Idempotency-Key or delegation key was used before."""
        row = await self.db.fetch_one("runs.create", params)
        if row is None:
            return None
        return Created(str(row["id"]), str(row["status"]), True, params["request_hash"], params["created_by"],
                       params["channel"], params["agent"], params["actor"], str(row["status"]))  # fmt: skip

    async def create_taken(
        self, params: dict[str, Any], holder: str, ttl_s: float
    ) -> tuple[Created, Checkpoint] | None:
        """`create` and `acquire` in one statement, for a run born on this process: the run made `running`
        under attempt 1, its lease held by `holder`; None when its Idempotency-Key or delegation key was
        used before (nothing is made then)."""
        row = await self.db.fetch_one("runs.create_taken", {**params, "holder": holder, "ttl": ttl_s})
        if row is None:
            return None
        created = Created(str(row["run_id"]), str(row["run_status"]), True, params["request_hash"],
                          params["created_by"], params["channel"], params["agent"], params["actor"],
                          born_status=str(row["run_status"]))  # fmt: skip
        return created, _taken(row)

    async def by_idempotency_key(self, key: str) -> Created | None:
        """The run made under `key`, once it is on the synchronous standby (I20: answered as made)."""
        row = await self.db.fetch_one("runs.by_idempotency_key", {"key": key})
        if row is None:
            return None
        return Created(str(row["id"]), str(row["status"]), False, row["request_hash"], row["created_by"],
                       row["channel"], row["agent"], row["made_by"], row["born_status"])  # fmt: skip

    async def by_delegation_key(self, key: str) -> Created | None:
        """The child made under `key`, once it is on the synchronous standby (I20: answered as made)."""
        row = await self.db.fetch_one("runs.by_delegation_key", {"key": key})
        return None if row is None else Created(str(row["id"]), str(row["status"]), False)

    # ----- taking a run (each through take_run: the lease and a new attempt) -----------------------

    async def acquire(self, run_id: str, holder: str, ttl_s: float) -> Checkpoint | None:
        """The run taken (its `run_status` as the take left it); None when another process has it."""
        row = await self.db.fetch_one("runs.acquire", {"run_id": run_id, "holder": holder, "ttl": ttl_s})
        return None if row is None else _taken(row)

    async def hand(self, run_id: str, holder: str, ttl_s: float) -> Given | None:
        """Take a run as `acquire` does, for the least loaded live process (`holder` if it is that one)."""
        row = await self.db.fetch_one("runs.hand", {"run_id": run_id, "holder": holder, "ttl": ttl_s})
        return None if row is None else _given(row)

    async def claim_lapsed(self, holder: str, ttl_s: float, limit: int, driving: Iterable[str]) -> list[Given]:
        """I5: lapsed leases claimed once each, spread over the least loaded live processes."""
        params = {"holder": holder, "ttl": ttl_s, "limit": limit, "driving": sorted(driving)}
        return [_given(r) for r in await self.db.fetch_all("leader.claim_lapsed", params)]

    async def claim_dead(self, holder: str, ttl_s: float, driving: Iterable[str]) -> list[Given]:
        """I5: dead processes' leases claimed once each, spread over the least loaded live processes."""
        params = {"holder": holder, "ttl": ttl_s, "driving": sorted(driving)}
        return [_given(r) for r in await self.db.fetch_all("leader.claim_dead", params)]

    async def take_up(self, holder: str, ttl_s: float, driving: Iterable[str]) -> list[Checkpoint]:
        """The runs other processes' takes gave `holder`, each taken up once under the attempt it was
        given by (I3), its lease renewed by this statement; runs in `driving` are left for later."""
        params = {"holder": holder, "ttl": ttl_s, "driving": sorted(driving)}
        return [_checkpoint(r) for r in await self.db.fetch_all("leases.take_up", params)]

    async def drain(self, holder: str) -> list[str]:
        """A clean stop begins: no more runs for `holder`; those given to it and not taken up are queued
        again, each under the attempt it was given by (I3). Returns their ids."""
        return [str(r["id"]) for r in await self.db.fetch_all("leader.drain", {"holder": holder})]

    async def claim_one(self, run_id: str, holder: str, ttl_s: float, driving: Iterable[str]) -> Checkpoint | None:
        params = {"run_id": run_id, "holder": holder, "ttl": ttl_s, "driving": sorted(driving)}
        row = await self.db.fetch_one("leader.claim_one", params)
        return None if row is None else _checkpoint(row)

    async def orphaned_queued(self, holder: str, grace_s: float, limit: int) -> list[str]:
        rows = await self.db.fetch_all("leader.orphaned_queued", {"holder": holder, "grace": grace_s, "limit": limit})
        return [str(r["id"]) for r in rows]

    async def waiting_decided(self, holder: str, limit: int) -> list[str]:
        rows = await self.db.fetch_all("runs.waiting_decided", {"holder": holder, "limit": limit})
        return [str(r["id"]) for r in rows]

    async def left_for_release(self, known: tuple[int, int], limit: int, run_id: str | None = None) -> list[LeftRun]:
        """Runs no live process can resume (their checkpoint's formats are newer than `known`, the state
        and seal formats this release reads, and than every live process's): left for a release that
        knows them. With `run_id`, that run alone."""
        params = {"state_format": known[0], "seal_format": known[1], "run_id": run_id, "limit": limit}
        return [row_as(LeftRun, r) for r in await self.db.fetch_all("leader.left_for_release", params)]

    async def hand_back(self, holder: str, held: Iterable[tuple[str, int]]) -> list[str]:
        """Queue again the runs this process drove, each under the attempt it held it by (I3)."""
        items = [{"run_id": run_id, "attempt": attempt} for run_id, attempt in held]
        if not items:
            return []
        rows = await self.db.fetch_all("leader.hand_back", {"holder": holder, "held": items})
        return [str(r["id"]) for r in rows]

    async def next_lapse_s(self, holder: str) -> float | None:
        row = await self.db.fetch_one("leader.next_lapse", {"holder": holder})
        return None if row is None or row["in_s"] is None else float(row["in_s"])

    # ----- reading ---------------------------------------------------------------------------------

    async def get(self, run_id: str) -> RunRecord | None:
        row = await self.db.fetch_one("runs.get", {"run_id": run_id})
        return None if row is None else row_as(RunRecord, row)

    async def status(self, run_id: str) -> RunStatus | None:
        row = await self.db.fetch_one("runs.status", {"run_id": run_id})
        return None if row is None else row_as(RunStatus, row)

    async def traceparent(self, run_id: str) -> str | None:
        """The traceparent the run was started under, when one was given (its trace's parent)."""
        row = await self.db.fetch_one("runs.traceparent", {"run_id": run_id})
        return None if row is None else row["traceparent"]

    async def transcript(self, run_id: str, after: int, limit: int) -> list[TranscriptRow]:
        params = {"run_id": run_id, "after": after, "limit": limit}
        return [row_as(TranscriptRow, r) for r in await self.db.fetch_all("transcripts.for_run", params)]

    async def unflushed(self, run_id: str) -> list[dict[str, Any]]:
        """Transcript entries still riding in the checkpoint (written with it, not yet to the table)."""
        row = await self.db.fetch_one("runs.unflushed", {"run_id": run_id})
        entries: list[dict[str, Any]] = list((row or {}).get("entries") or [])
        return entries

    async def audit_log(self, run_id: str | None, action: str | None, after: int, limit: int) -> list[AuditRow]:
        params = {"run_id": run_id, "action": action, "after": after, "limit": limit}
        return [row_as(AuditRow, r) for r in await self.db.fetch_all("audit.list", params)]

    # ----- what people do ---------------------------------------------------------------------------

    async def request_stop(self, run_id: str, by: str) -> StopRequested | None:
        """Flag the run stopped (its driver sees it at its next gate check); a run no process drives
        (queued or waiting) ends at once, its pending requests withdrawn with it (issue 32). None when
        there is no such run."""
        row = await self.db.fetch_one("runs.request_stop", {"run_id": run_id, "by": by})
        if row is None:
            return None
        ended = await self.db.execute("runs.stop_idle", {"run_id": run_id, "by": by})
        return StopRequested(str(row["agent"]), str(row["channel"]), ended_now=ended == 1)

    async def hold(self, run_id: str, by: str, reason: str | None) -> Row | None:
        """Hold the run against every retention pass (issue 34), audited; None when there is no such run."""
        return await self.db.fetch_one("runs.hold", {"run_id": run_id, "by": by, "reason": reason})

    async def release(self, run_id: str, by: str, reason: str | None) -> bool | None:
        """Release its hold, audited when there was one; whether there was, None when there is no such run."""
        row = await self.db.fetch_one("runs.release", {"run_id": run_id, "by": by, "reason": reason})
        return None if row is None else bool(row["was_held"])

    async def approvals(self, status: str | None, limit: int) -> list[Approval]:
        rows = await self.db.fetch_all("approvals.list", {"status": status, "limit": limit})
        return [row_as(Approval, r) for r in rows]

    async def asked_approvals(self, status: str | None, limit: int) -> list[AskedApproval]:
        rows = await self.db.fetch_all("approvals.list_asked", {"status": status, "limit": limit})
        return [AskedApproval(row_as(Approval, r), str(r["agent"]), r["created_by"]) for r in rows]

    async def approval(self, approval_id: str) -> Approval | None:
        """The request, once it is on the synchronous standby (I20: "decided already" is answered from it)."""
        row = await self.db.fetch_one("approvals.get", {"id": approval_id})
        return None if row is None else row_as(Approval, row)

    async def resume_restored(self, run_id: str, by: str, reason: str) -> Row | None:
        """I24: approve every request a restore asked of a person for this run, still pending (audited once);
        the run's status and how many were approved, or None when there is no such run."""
        return await self.db.fetch_one("approvals.resume_restored", {"run_id": run_id, "by": by, "reason": reason})

    async def decide(self, approval_id: str, status: str, by: str, reason: str | None) -> Approval | None:
        """Decide a pending request; None when it was decided otherwise already. The same decision by
        the same person again answers the request as it stands, changing nothing (I18)."""
        params = {"id": approval_id, "status": status, "by": by, "reason": reason}
        row = await self.db.fetch_one("approvals.decide", params)
        return None if row is None else row_as(Approval, row)

    async def give_input(
        self, run_id: str, text: str, by: str, answered_by: str, question_id: str | None = None
    ) -> GivenInput | None:
        """I18: the input for the question `question_id` names, else for the oldest pending one, bound to
        the request that gives it (`answered_by`). The question found, as it stood (a question this request
        answered before is found again and left as it is); None when the run asked no such question, or
        none is pending."""
        params = {"run_id": run_id, "text": text, "by": by, "answered_by": answered_by, "question_id": question_id}
        row = await self.db.fetch_one("runs.give_input", params)
        return None if row is None else row_as(GivenInput, row)

    async def waiting_for(self, run_id: str) -> list[Waiting]:
        return [row_as(Waiting, r) for r in await self.db.fetch_all("runs.waiting_for", {"run_id": run_id})]

    async def ping(self) -> None:
        await self.db.fetch_one("runs.ping")


class RunHandle(FencedHandle):
    """Every statement one attempt makes about its run, each fenced by `(run id, attempt)` (I3): one that
    matched nothing raises `Fenced`."""

    def __init__(self, db: Database, run_id: str, attempt: int) -> None:
        super().__init__(db, run_id, attempt)
        self.run_id = run_id

    def _bound(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "attempt": self.attempt}

    def _sealed(self, sealed: Sealed) -> dict[str, Any]:
        return {
            "step": sealed.step,
            "state": sealed.state,
            "seal": sealed.seal,
            "key_id": sealed.key_id,
            "prev_seal": sealed.prev_seal,
            "losses": sealed.losses,
            "state_format": sealed.state_format,
            "seal_format": sealed.seal_format,
        }

    # ----- checkpoints (I1) and the run's end --------------------------------------------------------

    async def write_checkpoint(self, sealed: Sealed, flush: Flush | None, opening: bool = False) -> None:
        """I1: the sealed checkpoint in ONE statement; with `flush`, the rows riding on it too. Without,
        a plain UPDATE of the checkpoint row: what a read-only step costs. `opening` (with `flush`): the
        attempt's first checkpoint, whose time its attempt's row records."""
        if flush is None:
            await self._fenced_count("runs.write_checkpoint_only", "writing the checkpoint", self._sealed(sealed))
            return
        params = {**self._sealed(sealed), "finished": flush.finished, "entries": flush.entries, "opening": opening}
        await self._fenced_count("runs.write_checkpoint", "writing the checkpoint", params)

    async def end(
        self,
        sealed: Sealed,
        flush: Flush,
        status: str,
        answer: SealedAnswer | None,
        error: str | None,
        actor: str,
    ) -> None:
        """The run ends (succeeded, failed or stopped): final checkpoint, status, lease released, its last
        rows, the kept answer (I12), transcript and audit, and the requests it still held withdrawn (issue
        32), in one statement."""
        await self._fenced_count("runs.end", f"ending the run as {status}", {
            **self._sealed(sealed), **_kept(answer), "finished": flush.finished, "entries": flush.entries,
            "status": status, "error": error, "action": f"agent.run.{status}", "actor": actor,
            "audit": {"step": sealed.step, "attempt": self.attempt, "error": error},
        })  # fmt: skip

    async def answered(self, sealed: Sealed, flush: Flush, answer: SealedAnswer, actor: str) -> None:
        """I12: the final answer kept and the run `answered`, its hand-on written ahead; the lease is kept."""
        await self._fenced_count("runs.answered", "keeping the answer", {
            **self._sealed(sealed), **_kept(answer), "finished": flush.finished, "entries": flush.entries,
            "actor": actor, "audit": {"step": sealed.step, "attempt": self.attempt},
        })  # fmt: skip

    async def kept_answer(self) -> KeptAnswer | None:
        row = await self.db.fetch_one("runs.kept_answer", {"run_id": self.run_id})
        return None if row is None else row_as(KeptAnswer, row)

    async def hand_on(self, answer: str, entries: list[dict[str, Any]], actor: str, detail: dict[str, Any]) -> None:
        """I12: the kept answer was handed on; the run succeeds with it, once, under this attempt (a request
        left pending, which none should be, withdrawn)."""
        await self._fenced_count("runs.hand_on", "handing on the answer", {
            "answer": answer, "entries": entries, "actor": actor, "audit": {"attempt": self.attempt, **detail},
        })  # fmt: skip

    async def record_fire_outcome(self, answer: str) -> tuple[bool, bool]:
        """The cron hand-on (I12): the schedule fire that made this run records its answer, under this
        attempt. Returns (a fire made this run, this call recorded it); an earlier attempt's record is
        kept, so the hook is safe to run twice."""
        row = await self._fenced("schedules.record_outcome", "recording the fire's outcome", {"answer": answer})
        return bool(row["fire"]), bool(row["recorded"])

    async def suspend(
        self,
        sealed: Sealed,
        flush: Flush,
        waiting: list[dict[str, Any]],
        actor: str,
        asks: list[dict[str, Any]] | None = None,
    ) -> bool:
        """I15: end waiting for a person only while a request of the run is still pending. The run's
        row is locked first, so a decision whose wake-up came while the run was still running is seen
        here. True when the run now waits; False when every request was decided meanwhile (the
        checkpoint and rows are written, the run stays running under this attempt). `asks`: the questions
        the step asked through `request_input` ({id, idx, question}), filed by this same statement."""
        async with self.db.transaction() as tx:
            await self._fenced("runs.lock", "suspending the run", on=tx)
            row = await self._fenced("runs.suspend", "suspending the run", {
                **self._sealed(sealed), "finished": flush.finished, "entries": flush.entries,
                "waiting": waiting, "actor": actor, "audit": {"step": sealed.step, "attempt": self.attempt},
                "asks": asks or [],
            }, on=tx)  # fmt: skip
        return bool(row["suspended"])

    async def fail(self, error: str, action: str, actor: str) -> None:
        """Fail the run without writing a checkpoint (one that cannot be trusted, an owner who may not
        run it, a statement refused for good), fenced like every other statement (I3); the requests it
        still held are withdrawn in the same statement (issue 32)."""
        await self._fenced_count("runs.fail", "failing the run", {
            "error": error, "action": action, "actor": actor, "audit": {"reason": error, "attempt": self.attempt},
        })  # fmt: skip

    # ----- calls (I2) ------------------------------------------------------------------------------------

    async def mark_in_doubt(self, params: dict[str, Any]) -> None:
        """I2: one statement committed just before a changing call is sent; it records how long the
        call can be in flight (I14)."""
        await self._fenced_count("calls.mark_in_doubt", "marking a call in doubt", params)

    async def record_outcome(self, params: dict[str, Any]) -> None:
        """I2: a call's outcome, fenced by the attempt only: an answer that came back after the lease
        deadline is still known and kept unless the run was taken over. `sent_at` and `outcome_at`: epoch
        seconds of this process's wall clock (None: not known)."""
        await self._fenced_count("calls.record_outcome", "recording a call's outcome",
                           {"sent_at": None, "outcome_at": None, **params})  # fmt: skip

    async def reopen_uncertain(self, step: int, idx: int, uncertain: str) -> None:
        """I9, I14: a write this attempt sent whose outcome was left open, put back in doubt to be settled
        (read back, then sent again only if absent); `Fenced` once the run was taken over (I3)."""
        await self._fenced_count("calls.reopen_uncertain", "reopening a write whose outcome was left open",
                           {"step": step, "idx": idx, "uncertain": uncertain})  # fmt: skip

    async def record_reference(self, step: int, idx: int, ref: str) -> None:
        """I9: what a call in doubt can be found again by (a remote agent's task id), recorded the moment
        its vendor named it, by the attempt that marked it; `Fenced` once the run was taken over (I3)."""
        await self._fenced_count("calls.record_reference", "recording a call's remote reference",
                           {"step": step, "idx": idx, "ref": ref})  # fmt: skip

    async def file_approval(self, params: dict[str, Any]) -> Approval:
        """I15: file (or find, by its binding) the request for one call."""
        params = {"asked_why": None, **params}  # None: the approval gate asks (I24 sets why otherwise)
        return row_as(Approval, await self._fenced("approvals.file", "filing an approval", params))

    async def audit(self, action: str, actor: str, detail: dict[str, Any]) -> None:
        params = {"action": action, "actor": actor, "detail": detail}
        await self._fenced_count("runs.audit", f"auditing {action}", params)

    # ----- reads an attempt makes -----------------------------------------------------------------------

    async def gate_facts(self) -> GateFacts:
        return gate_facts_of(await self._fenced("runs.gate_facts", "reading gate facts (the run is gone)"))

    async def calls_for_step(self, step: int) -> list[CallRecord]:
        return [_call(r) for r in await self.db.fetch_all("calls.for_step", {"run_id": self.run_id, "step": step})]

    async def approvals_for_step(self, step: int) -> list[Approval]:
        rows = await self.db.fetch_all("approvals.for_step", {"run_id": self.run_id, "step": step})
        return [row_as(Approval, r) for r in rows]

    async def input_for(self, step: int, idx: int) -> Input | None:
        row = await self.db.fetch_one("runs.input_for", {"run_id": self.run_id, "step": step, "idx": idx})
        return None if row is None else row_as(Input, row)

    async def rows_after_head(self, step: int, sealed_attempt: int) -> int:
        """I17: rows written after the checkpoint the run holds (a rolled-back checkpoint leaves some)."""
        params = {"run_id": self.run_id, "step": step, "sealed_attempt": sealed_attempt}
        row = await self.db.fetch_one("runs.rows_after_head", params)
        return int(row["n"]) if row else 0
