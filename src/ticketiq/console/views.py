"""What the console's pages show, as pure functions of the dicts the API answers (console-contract.md):
durations, the waterfall's geometry, the write ledger and the recovery rows, the filters of the run
list. No I/O: the routes read, these decide what a person sees, the templates lay it out (escaped).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from ticketiq.engine.engine import TERMINAL
from ticketiq.views.run_list import STATUSES

# What the run list's filter form sends; anything else in the query is kept out of its links.
FILTERS = ("status", "agent", "channel", "created_by", "since", "until", "q", "limit")
# The SVG viewBox width of a waterfall row; bars are placed in these units, stretched to the row.
SPAN = 1000.0
# A bar this narrow (in SPAN units) still shows: a 2 ms call in a 10 s run is not lost.
MIN_BAR = 2.0


def when(value: Any) -> datetime | None:
    """A time as the API answers it (a datetime, or ISO 8601 text) as a datetime; None for none."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def seconds_between(start: Any, end: Any) -> float | None:
    a, b = when(start), when(end)
    if a is None or b is None:
        return None
    return (b - a).total_seconds()


def duration(seconds: float | None) -> str:
    """`840 ms`, `2.41 s`, `3 m 05 s`, `2 h 04 m`; an em dash for none."""
    if seconds is None:
        return "—"
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} m {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} m"


def clock(value: Any) -> str:
    """A time for a table cell: `2026-01-12 09:14:03.215` (UTC offset dropped, the tooltip keeps it)."""
    moment = when(value)
    if moment is None:
        return "—"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def clock_of_day(value: Any) -> str:
    """A time where the day is plain from the page (a run's ledger): `09:14:03.215`."""
    moment = when(value)
    if moment is None:
        return "—"
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def status_tone(status: str | None) -> str:
    """The badge colour class of a run, job, call or attempt status."""
    tones = {
        "succeeded": "ok", "answered": "ok", "ok": "ok", "done": "ok", "finished": "ok", "approved": "ok",
        "replied": "ok", "found": "ok", "sent_once": "ok", "resent_same_key": "ok", "made": "ok",
        "running": "live", "alive": "live", "queued": "idle", "pending": "idle", "firing": "live",
        "waiting": "wait", "held": "wait", "in_doubt": "wait", "handed_back": "wait", "settled": "wait",
        "failed": "bad", "error": "bad", "rejected": "bad", "refused": "bad", "lost": "bad", "died": "bad",
        "stalled": "bad", "interrupted": "bad", "unknown": "bad",
        "stopped": "off", "cancelled": "off", "skipped": "off", "withdrawn": "off",
        "synchronous": "ok", "one copy": "wait",  # the database's commits: on two servers, or on one
        "ready": "ok", "connecting": "wait", "unreachable": "bad",  # an MCP server, as a process reaches it
    }  # fmt: skip
    return tones.get(status or "", "idle")


# ----- the run list ---------------------------------------------------------------------------------------


def filters_of(query: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The run list's filters from the page's query: known fields only, empty values dropped (the filter
    form sends every field), `status` as often as it was given."""
    found: dict[str, list[str]] = {}
    for name, value in query:
        if name in FILTERS and value.strip():
            found.setdefault(name, []).append(value.strip())
    return found


def query_for(filters: Mapping[str, Sequence[str]], **changes: str | None) -> str:
    """The query string of the run list with `filters`, each of `changes` set (None: removed)."""
    pairs = [(k, v) for k, values in filters.items() if k not in changes for v in values]
    pairs += [(k, v) for k, v in changes.items() if v is not None]
    return urlencode(pairs)


# What `Engine.run_counts` counts of an ended status: only the runs made in the last day (counting all of
# history reads all of it, at every look), while a status still going counts every run however old.
RECENT = "made in the last 24 h"


@dataclass(frozen=True)
class Count:
    status: str
    count: int
    selected: bool
    link: str  # the run list with this status as its only status filter
    recent: bool  # an ended status: the count is of the runs made in the last 24 h only (`RECENT`)


def counts_row(counts: Mapping[str, int], filters: Mapping[str, Sequence[str]]) -> list[Count]:
    """Every status with its count, in lifecycle order (statuses the engine adds later, after); the
    ended ones marked as counted over the last day only."""
    chosen = set(filters.get("status", ()))
    order = [*STATUSES, *sorted(set(counts) - set(STATUSES))]
    rest = {k: v for k, v in filters.items() if k != "status"}
    return [Count(s, int(counts.get(s, 0)), s in chosen, query_for({**rest, "status": [s]}), s in TERMINAL)
            for s in order]  # fmt: skip


# ----- a run: the waterfall --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    kind: str  # step / model / call
    label: str
    x: float  # SPAN units from the run's first moment
    width: float
    seconds: float | None
    tone: str
    open: bool = False  # no end recorded: drawn to the last moment known, hatched


@dataclass(frozen=True)
class WaterfallRow:
    step: int
    attempt: int
    bars: list[Bar]
    seconds: float | None
    # The model's final answer: a model call that asked for no tool. It is a row of the waterfall but not
    # one of the run's `steps` (which counts the steps that called tools), so it is labelled apart.
    answer: bool = False


@dataclass(frozen=True)
class Waterfall:
    rows: list[WaterfallRow]
    seconds: float  # the whole span drawn
    ticks: list[tuple[float, str]]  # (x in SPAN units, label)


def _moments(steps: Sequence[Mapping[str, Any]]) -> list[datetime]:
    found = []
    for step in steps:
        found += [when(step.get("started_at")), when(step.get("ended_at"))]
        for call in step.get("calls") or ():
            found += [when(call.get(k)) for k in ("marked_at", "sent_at", "outcome_at")]
    return [m for m in found if m is not None]


def waterfall(steps: Sequence[Mapping[str, Any]], now: datetime | None = None) -> Waterfall:
    """Each step as a row: its whole span, the model's part of it (from the step's start, `model_ms`
    long) and each call from its mark (or send) to its outcome, placed on one time axis whose width is
    the run's span. A step or call with no end yet is drawn to the last moment known and marked open."""
    moments = _moments(steps) + ([now] if now is not None else [])
    if not moments:
        return Waterfall([], 0.0, [])
    t0, t1 = min(moments), max(moments)
    total = max((t1 - t0).total_seconds(), 0.001)

    def place(start: datetime, end: datetime) -> tuple[float, float]:
        x = (start - t0).total_seconds() / total * SPAN
        width = max((end - start).total_seconds() / total * SPAN, MIN_BAR)
        return min(x, SPAN - MIN_BAR), min(width, SPAN - min(x, SPAN - MIN_BAR))

    rows = []
    for step in steps:
        start, end = when(step.get("started_at")), when(step.get("ended_at"))
        answer = is_answer(step)
        bars: list[Bar] = []
        if start is not None:
            x, w = place(start, end or t1)
            label = "answer" if answer else f"step {step.get('step')}"
            bars.append(Bar("step", label, x, w, seconds_between(start, end), "step", end is None))
            model_ms = step.get("model_ms")
            if isinstance(model_ms, int | float):
                mx, mw = place(start, min(start + timedelta(milliseconds=model_ms), end or t1))
                bars.append(Bar("model", "model", mx, mw, model_ms / 1000, "model"))
        for call in step.get("calls") or ():
            began = when(call.get("marked_at")) or when(call.get("sent_at"))
            if began is None:
                continue
            ended = when(call.get("outcome_at"))
            x, w = place(began, ended or t1)
            tone = status_tone(call.get("outcome") or call.get("status"))
            bars.append(Bar("call", str(call.get("tool")), x, w, seconds_between(began, ended), tone, ended is None))
        seconds = seconds_between(start, end)
        rows.append(WaterfallRow(int(step.get("step") or 0), int(step.get("attempt") or 0), bars, seconds, answer))
    return Waterfall(rows, total, ticks(total))


def is_answer(step: Mapping[str, Any]) -> bool:
    """A timeline step that called no tool: the model answered in text (its `model_answer` note)."""
    return not step.get("calls")


def ticks(total_s: float, count: int = 4) -> list[tuple[float, str]]:
    """Axis labels at even fractions of the span."""
    return [(SPAN * i / count, duration(total_s * i / count)) for i in range(count + 1)]


# ----- a run: the write ledger and the recovery timeline ---------------------------------------------------

READ_CLASSES = frozenset({"read"})


@dataclass(frozen=True)
class LedgerRow:
    attempt: int
    step: int
    idx: int
    tool: str
    tool_class: str
    key: str | None
    marked_at: Any
    sent_at: Any
    outcome_at: Any
    outcome: str | None
    status: str | None
    settled: Mapping[str, Any] | None
    approval_id: str | None
    took_s: float | None


def ledger(steps: Sequence[Mapping[str, Any]]) -> dict[int, list[LedgerRow]]:
    """Every write (each call that is not a read) by the attempt that made its step, in step order (a write
    a takeover settled shows under the attempt that first marked it, with the settlement's attempt)."""
    by_attempt: dict[int, list[LedgerRow]] = {}
    for step in steps:
        for call in step.get("calls") or ():
            if str(call.get("class")) in READ_CLASSES:
                continue
            attempt = int(step.get("attempt") or 0)
            began = call.get("marked_at") or call.get("sent_at")
            by_attempt.setdefault(attempt, []).append(LedgerRow(
                attempt, int(step.get("step") or 0), int(call.get("idx") or 0), str(call.get("tool")),
                str(call.get("class")), call.get("key"), call.get("marked_at"), call.get("sent_at"),
                call.get("outcome_at"), call.get("outcome"), call.get("status"), call.get("settled"),
                call.get("approval_id"), seconds_between(began, call.get("outcome_at")),
            ))  # fmt: skip
    return dict(sorted(by_attempt.items()))


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    process: str | None
    started_at: Any
    ended_at: Any
    ended: str | None
    lost_detected_at: Any
    taken_after_s: float | None
    taken_from: str | None  # the process that lost the run to this attempt
    settled: list[Mapping[str, Any]]
    held_s: float | None


def recovery(attempts: Sequence[Mapping[str, Any]]) -> list[AttemptRow]:
    """Each attempt with the process that held it; a takeover names the process it took the run from
    (the previous attempt's, when that one was lost or stalled)."""
    rows = []
    previous: Mapping[str, Any] | None = None
    for attempt in sorted(attempts, key=lambda a: int(a.get("attempt") or 0)):
        lost_by = previous is not None and previous.get("ended") in ("lost", "stalled")
        rows.append(AttemptRow(
            int(attempt.get("attempt") or 0), attempt.get("process"), attempt.get("started_at"),
            attempt.get("ended_at"), attempt.get("ended"), attempt.get("lost_detected_at"),
            attempt.get("taken_after_s"), previous.get("process") if lost_by and previous else None,
            list(attempt.get("settled") or ()), seconds_between(attempt.get("started_at"), attempt.get("ended_at")),
        ))  # fmt: skip
        previous = attempt
    return rows


def transcript_text(entry: Mapping[str, Any]) -> str:
    """One transcript entry's fields but its kind, id and time, as `name: value` lines."""
    skip = {"kind", "id", "at"}
    return "\n".join(f"{k}: {v}" for k, v in entry.items() if k not in skip)


def transcript_entries(rows: Sequence[Any], pending: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transcript as `GET /v1/runs/{id}/transcript` answers it: a row of kind `entries` holds the
    several entries one statement wrote; entries still riding in the checkpoint come last, unflushed."""
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.kind == "entries":
            out += [{"at": row.at, "kind": e["kind"], **e["body"]} for e in row.body["entries"]]
        else:
            out.append({"at": row.at, "kind": row.kind, **row.body})
    out += [{"at": None, "kind": e["kind"], **e["body"]} for e in pending]
    return out


INPUT_REFUSALS = {
    "no_question": (404, "the run asked no such question; reload the page to see what it waits for"),
    "not_waiting": (409, "the run is not waiting for input any more"),
    "reused": (409, "this question was answered already, by this token with another input"),
    "taken": (409, "this question was answered already, by another input"),
}


def input_refusal(verdict: str) -> tuple[int, str] | None:
    """The refusal of an input the engine did not take (I18); None when it was given or is a repeat."""
    return INPUT_REFUSALS.get(verdict)
