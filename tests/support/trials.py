"""Kill trials, judged: what one trial is, what the database says about it, and the verdict, as pure
functions over rows (the harness in `trial_rig.py` does the I/O).

A trial is one record an entry point made: a cron fire, a Teams turn from the durable inbox, or a
signed webhook delivery, each running the triage agent for its own ticket OPS-n (read the issue, open
an incident, comment on the issue, reply in the ops thread, answer); a run of the `noter` agent made by
`POST /v1/runs` (issue 33: an MCP server's tools, add_note to the notebook OPS-n, a plain write, and
set_note OPS-n-status, an idempotent write, then get_note); or a background job (issue 10): a
source sync of its own generated Jira project, or a run of the sample `follow-up` workflow on its own
ticket (read, summarise, comment, check, comment again, check). It is judged as the product page says:

- lost: its record never reaches its end (the run is not `succeeded`; a cron fire's outcome is not
  recorded; a Teams turn has no reply), or a write the run says it made is not there; a job not
  `succeeded`, a sync with fewer knowledge rows than the project has issues, a workflow whose comment
  steps are not all applied at Jira; an MCP run whose add_note its calls table says was done with no
  add_note applied for its notebook, or whose status note does not read what set_note sent;
- duplicate: more than one incident from its one create, its Jira comment applied more than once, its
  ops-thread reply or its turn's reply posted more than once; a job's one request making two jobs, a
  sync with more rows (or keys, or imported issues in its result) than the project has issues, a
  workflow comment applied twice under one step key or with one text, or more comments than the
  workflow's comment steps executed; an MCP run's one add_note applied more than once (set_note sent
  again is no duplicate: it is idempotent, resent on purpose with the same arguments);
- caught in flight: the event (a kill, a stall, Postgres killed, a roll) found it unfinished: its run or
  job was taken over (losses > 0), its run was handed over by a process stopping cleanly (a roll's
  SIGTERM: an attempt ended `handed_back`), its request was cut and sent again, or it was running across
  the event;
- recovery: from the event to the trial's end (the run's or job's `finished_at`, on the database
  clock), for every trial caught in flight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

KINDS = ("cron", "teams", "webhook", "mcp", "sync", "workflow")
JOB_KINDS = ("sync", "workflow")  # begun as background jobs (POST /v1/jobs, POST /v1/workflows/.../runs)
DEFAULT_MIX = ("cron", "teams", "webhook", "mcp")
MCP_STATUS_TEXT = "noted"  # what the noter's set_note writes (standins/scripts/noter.yaml)
MIX_VARIABLE = "LIYAGENT_KILL_MIX"
RECOVERY_LIMIT_S = 15.0


# The database modes strike while runs, a source sync and a workflow are in flight: every kind by default.
MODE_MIX = {"failover": KINDS, "stall": KINDS}


def default_mix(mode: str) -> tuple[str, ...]:
    return MODE_MIX.get(mode, DEFAULT_MIX)


def parse_mix(text: str | None, default: tuple[str, ...] = DEFAULT_MIX) -> tuple[str, ...]:
    """The trial kinds each round begins, from the comma list `LIYAGENT_KILL_MIX` (or
    `TICKETIQ_KILL_MIX`); unset or blank: `default` (the mode's). A ValueError names the variable and
    the kinds."""
    if text is None or not text.strip():
        return default
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    known = ", ".join(KINDS)
    unknown = [k for k in kinds if k not in KINDS] or ([] if kinds else [text])
    if unknown:
        raise ValueError(f"{MIX_VARIABLE} (or TICKETIQ_KILL_MIX) names unknown trial kind {unknown[0]!r}; "
                         f"the kinds are {known}, e.g. {MIX_VARIABLE}={','.join(KINDS)}")  # fmt: skip
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise ValueError(f"{MIX_VARIABLE} (or TICKETIQ_KILL_MIX) names {twice[0]!r} twice; name each of {known} once")
    return kinds


@dataclass
class Trial:
    kind: str
    ticket: int
    round_no: int
    ref: str  # the schedule id, the Teams activity id, the webhook delivery id, or a run's or job's id once made
    conversation: str = ""  # a Teams turn's own thread, where its reply goes
    interrupted: bool = False  # its request was cut by the event and sent again
    claimed_by: str = ""  # a job trial: which process's worker claimed the job first (victim, survivor)

    @property
    def subject(self) -> str:
        """What the trial is about: a sync's own Jira project, else its ticket."""
        return sync_project(self.ticket) if self.kind == "sync" else f"OPS-{self.ticket}"


def sync_project(ticket: int) -> str:
    """A sync trial's own Jira project key (2-10 of A-Z and digits, a letter first): SYNC1003."""
    return f"SYNC{ticket}"


@dataclass(frozen=True)
class Observed:
    """What the database says about one trial, read after the round."""

    run_status: str | None
    losses: int
    created_at: datetime | None
    finished_at: datetime | None
    ended: bool  # the record's own end: a fire's outcome recorded, a turn's reply posted, a delivery's run
    incidents: int
    comments: int
    agent_replies: int
    turn_replies: int  # Teams turns only; 0 for the others
    handed: int = 0  # attempts of its run handed back by a process stopping cleanly (no loss counted)
    # An MCP run only: runs its one keyed request made; add_note and set_note applied at the stand-in for its
    # notebook and status note; whether its calls table says add_note was done with a note made (not settled
    # unknown); and the status note's text now (None: no such note).
    runs: int = 1
    adds: int = 0
    sets: int = 0
    add_done: bool = False
    status_note: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Observed:
        return cls(
            run_status=row.get("status"), losses=int(row.get("losses") or 0), created_at=row.get("created_at"),
            finished_at=row.get("finished_at"), ended=bool(row.get("ended")), incidents=int(row["incidents"]),
            comments=int(row["comments"]), agent_replies=int(row["agent_replies"]),
            turn_replies=int(row.get("turn_replies") or 0), handed=int(row.get("handed") or 0),
            runs=int(row.get("runs") or 0), adds=int(row.get("adds") or 0),
            sets=int(row.get("sets") or 0), add_done=bool(row.get("add_done")), status_note=row.get("status_note"),
        )  # fmt: skip


@dataclass(frozen=True)
class JobSeen:
    """What the database says about a job trial (a source sync or a workflow run), read after the
    round: the job its request was answered with (else the first one made for it) and what it left."""

    status: str | None  # None: no job was made
    jobs: int  # jobs made for the trial's one (keyed) request
    losses: int
    created_at: datetime | None
    finished_at: datetime | None
    # A sync: the stand-in project's issues, the project's knowledge rows and distinct keys, and the
    # issues the job's result says it imported.
    generated: int = 0
    rows: int = 0
    keys: int = 0
    result_issues: int | None = None
    # A workflow: its comment steps executed (workflow_steps, done), the comments Jira applied on its
    # ticket, and the most applied under one step key and with one text.
    comment_steps: int = 0
    comments: int = 0
    most_per_key: int = 0
    most_per_text: int = 0
    handed: int = 0  # not read for a job: it counts as caught by its losses, its cut request or spanning

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> JobSeen:
        def n(name: str) -> int:
            return int(row.get(name) or 0)

        result = row.get("result_issues")
        return cls(
            status=row.get("status"), jobs=n("jobs"), losses=n("losses"), created_at=row.get("created_at"),
            finished_at=row.get("finished_at"), generated=n("generated"), rows=n("rows"), keys=n("keys"),
            result_issues=None if result is None else int(result), comment_steps=n("comment_steps"),
            comments=n("comments"), most_per_key=n("most_per_key"), most_per_text=n("most_per_text"),
        )  # fmt: skip


Seen = Observed | JobSeen


@dataclass(frozen=True)
class Verdict:
    trial: Trial
    lost: str | None
    duplicates: tuple[str, ...]
    in_flight: bool
    recovery_s: float | None

    @property
    def failed(self) -> bool:
        return self.lost is not None or bool(self.duplicates) or (self.recovery_s or 0.0) > RECOVERY_LIMIT_S


def lost_because(trial: Trial, seen: Seen) -> str | None:
    """Why the trial is lost, or None when it reached its end with every write there."""
    if isinstance(seen, JobSeen):
        return _job_lost_because(trial, seen)
    if seen.run_status is None:
        return "no run was made for it"
    if seen.run_status != "succeeded":
        return f"its run ended {seen.run_status}"
    if not seen.ended:
        return {"cron": "the fire's outcome was never recorded", "teams": "the turn ended with no reply"}.get(
            trial.kind, "its record never reached its end"
        )
    if trial.kind == "mcp":
        return _mcp_lost_because(seen)
    missing = [w for w, n in (("incident", seen.incidents), ("Jira comment", seen.comments),
                              ("ops-thread reply", seen.agent_replies)) if n == 0]  # fmt: skip
    if trial.kind == "teams" and seen.turn_replies == 0:
        missing.append("turn reply")
    return f"succeeded without its {', '.join(missing)}" if missing else None


def _mcp_lost_because(seen: Observed) -> str | None:
    # add_note is a plain write: one left in doubt by the event is settled unknown and never sent again, so
    # none applied is honest then; only a call recorded done with its note made must have landed.
    if seen.add_done and seen.adds == 0:
        return "its calls say add_note was done, but no add_note was applied for its notebook"
    if seen.sets == 0:
        return "succeeded without its set_note applied"
    if seen.status_note != MCP_STATUS_TEXT:
        return f"its status note reads {seen.status_note!r}, not {MCP_STATUS_TEXT!r}"
    return None


def _job_lost_because(trial: Trial, seen: JobSeen) -> str | None:
    if seen.status is None:
        return "no job was made for it"
    if seen.status != "succeeded":
        return (
            f"its job ended {seen.status}" if seen.finished_at is not None else f"its job never ended ({seen.status})"
        )
    if trial.kind == "sync":
        if seen.rows < seen.generated:
            return f"succeeded with {seen.rows} of the project's {seen.generated} issues in the knowledge table"
        if seen.result_issues is not None and seen.result_issues < seen.generated:
            return f"succeeded saying it imported {seen.result_issues} of the project's {seen.generated} issues"
        return None
    if seen.comment_steps == 0:
        return "succeeded without a comment step"
    if seen.comments < seen.comment_steps:
        return f"{seen.comments} of its {seen.comment_steps} comments applied at Jira"
    return None


def duplicates_of(trial: Trial, seen: Seen) -> tuple[str, ...]:
    if isinstance(seen, JobSeen):
        return _job_duplicates_of(trial, seen)
    if trial.kind == "mcp":
        found = [f"its one request made {seen.runs} runs"] if seen.runs > 1 else []
        # set_note is not counted: an idempotent write is sent again on purpose, with the same arguments.
        return (*found, *(f"MCP add_note applied {n} times" for n in [seen.adds] if n > 1))
    found = [f"{n} incidents from one create" for n in [seen.incidents] if n > 1]
    found += [f"Jira comment sent {n} times" for n in [seen.comments] if n > 1]
    found += [f"ops-thread reply posted {n} times" for n in [seen.agent_replies] if n > 1]
    if trial.kind == "teams":
        found += [f"Teams turn reply posted {n} times" for n in [seen.turn_replies] if n > 1]
    return tuple(found)


def _job_duplicates_of(trial: Trial, seen: JobSeen) -> tuple[str, ...]:
    found = [f"its one request made {seen.jobs} jobs"] if seen.jobs > 1 else []
    if trial.kind == "sync":
        if seen.rows > seen.keys:
            found.append(f"{seen.rows - seen.keys} issues stored twice")
        if seen.rows > seen.generated:
            found.append(f"{seen.rows} knowledge rows for {seen.generated} issues")
        if seen.result_issues is not None and seen.result_issues > seen.generated:
            found.append(f"its result says {seen.result_issues} issues imported of {seen.generated}")
        return tuple(found)
    if seen.most_per_key > 1:
        found.append(f"a comment applied {seen.most_per_key} times under one step key")
    if seen.most_per_text > 1:
        found.append(f"one comment text applied {seen.most_per_text} times")
    if seen.comments > seen.comment_steps:
        found.append(f"{seen.comments} comments applied for {seen.comment_steps} comment steps executed")
    return tuple(found)


def caught(trial: Trial, seen: Seen, event_at: datetime, spanning: bool) -> bool:
    """Whether the event found the trial unfinished: its run was taken over from the dead process, handed
    over by one stopping, or its request was cut. With `spanning` (an event every process meets: Postgres
    killed, a roll), also a run that was running across the event wherever it ran."""
    if trial.interrupted or seen.losses > 0 or seen.handed > 0:
        return True
    if not spanning:
        return False
    started = seen.created_at is not None and seen.created_at < event_at
    return started and (seen.finished_at is None or seen.finished_at > event_at)


def judge(trial: Trial, seen: Seen, event_at: datetime, spanning: bool = False) -> Verdict:
    in_flight = caught(trial, seen, event_at, spanning)
    recovery = None
    if in_flight and seen.finished_at is not None:
        recovery = max(0.0, (seen.finished_at - event_at).total_seconds())
    return Verdict(trial, lost_because(trial, seen), duplicates_of(trial, seen), in_flight, recovery)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank: a value that was measured, never an interpolation."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Tally:
    """The running count the progress line shows, and the result at the end."""

    rounds: int = 0
    rounds_in_flight: int = 0
    verdicts: list[Verdict] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add_round(self, verdicts: Iterable[Verdict], problems: Iterable[str] = ()) -> None:
        added = list(verdicts)
        self.rounds += 1
        self.rounds_in_flight += any(v.in_flight for v in added)
        self.verdicts += added
        for v in added:
            t = v.trial
            what = f"round {t.round_no} {t.kind} {t.subject}"
            if v.lost is not None:
                self.failures.append(f"{what}: lost, {v.lost}")
            self.failures += [f"{what}: duplicate, {d}" for d in v.duplicates]
            if (v.recovery_s or 0.0) > RECOVERY_LIMIT_S:
                self.failures.append(f"{what}: recovered in {v.recovery_s:.2f} s (over {RECOVERY_LIMIT_S:g} s)")
        self.failures += list(problems)

    @property
    def trials(self) -> int:
        return len(self.verdicts)

    @property
    def in_flight(self) -> int:
        return sum(v.in_flight for v in self.verdicts)

    @property
    def lost(self) -> int:
        return sum(v.lost is not None for v in self.verdicts)

    @property
    def duplicates(self) -> int:
        return sum(bool(v.duplicates) for v in self.verdicts)

    @property
    def recoveries(self) -> list[float]:
        return [v.recovery_s for v in self.verdicts if v.recovery_s is not None]

    @property
    def slowest(self) -> float:
        return max(self.recoveries, default=0.0)

    def enough_in_flight(self) -> bool:
        """At least half the trials caught in flight, or the harness tests nothing."""
        return self.trials > 0 and 2 * self.in_flight >= self.trials

    @property
    def passed(self) -> bool:
        return not self.failures and self.enough_in_flight()

    def kinds(self) -> list[str]:
        """The kinds these trials were of, in KINDS order."""
        return [k for k in KINDS if any(v.trial.kind == k for v in self.verdicts)]

    def by_kind(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for kind in self.kinds():
            mine = [v for v in self.verdicts if v.trial.kind == kind]
            out[kind] = {
                "trials": len(mine), "in_flight": sum(v.in_flight for v in mine),
                "lost": sum(v.lost is not None for v in mine), "duplicates": sum(bool(v.duplicates) for v in mine),
            }  # fmt: skip
        return out

    def recovery_by_kind(self) -> dict[str, dict[str, float]]:
        return {kind: self.summary(kind) for kind in self.kinds()}

    def summary(self, kind: str | None = None) -> dict[str, float]:
        r = [v.recovery_s for v in self.verdicts
             if v.recovery_s is not None and kind in (None, v.trial.kind)]  # fmt: skip
        return {
            "p50": percentile(r, 50),
            "p95": percentile(r, 95),
            "p99": percentile(r, 99),
            "max": max(r, default=0.0),
        }
