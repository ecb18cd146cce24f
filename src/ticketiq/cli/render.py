"""What the CLI prints about runs and approvals: rich tables of the API's JSON, and one line per run
event. Pure: the API's JSON in, tables or text out.

Every value shown is text from outside (model answers, inputs, questions, tool names, vendor keys):
each cell is a `rich.text.Text` (never parsed as markup) with the control characters a terminal
would obey (escape sequences, bidi overrides) shown as visible escapes.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ticketiq.cli.client import console_link

# A run in one of these has ended (`stopped`: ended by Stop, issue 16).
ENDED = frozenset({"succeeded", "failed", "interrupted", "stopped"})
STATUS_STYLE = {
    "succeeded": "green", "failed": "red", "interrupted": "red", "stopped": "magenta", "waiting": "yellow",
    "running": "cyan", "answered": "cyan", "queued": "dim", "withdrawn": "magenta",
}  # fmt: skip
# A terminal at least this wide gets a column for every field; a narrower one (80 columns, a pipe) gets
# the run or approval id whole in its own column and the other fields stacked beside it.
WIDE = 150
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def safe(value: Any) -> str:
    """Text as a terminal shows it, never obeys it: control characters (but newline and tab) and bidi
    overrides become visible escapes."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return "".join(_escaped(ch) if _obeyed(ch) else ch for ch in text)


def _obeyed(ch: str) -> bool:
    return (unicodedata.category(ch) == "Cc" and ch not in "\n\t") or ch in _BIDI


def _escaped(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def cell(value: Any, style: str = "") -> Text:
    return Text("-" if value is None or value == "" else safe(value), style=style)


def status_cell(status: str) -> Text:
    return cell(status, STATUS_STYLE.get(status, ""))


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def when(value: Any) -> str:
    """A time as `2026-05-01 12:00:01Z` (UTC)."""
    at = parse_time(value)
    return "-" if at is None else at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def clock(value: Any) -> str:
    """A time of day to the millisecond, UTC: `12:00:01.234`."""
    at = parse_time(value)
    return "-" if at is None else at.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]


def span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def took(start: Any, end: Any) -> str:
    """The time between two of the API's times, or `-` when either is missing."""
    a, b = parse_time(start), parse_time(end)
    return "-" if a is None or b is None else span((b - a).total_seconds())


def since(origin: datetime | None, value: Any) -> str:
    """A time as the offset from the run's start: `+1.20 s`."""
    at = parse_time(value)
    if at is None:
        return "-"
    if origin is None:
        return clock(value)
    return f"+{(at - origin).total_seconds():.3f} s"


def waiting_text(waiting: Mapping[str, Any] | None) -> str:
    """`waiting_for` (the oldest thing a waiting run waits for) in a few words."""
    if not waiting:
        return "-"
    if waiting.get("kind") == "input":
        return f"input: {waiting.get('question')} (question {waiting.get('question_id')})"
    if waiting.get("kind") == "approval":
        return f"approval of {waiting.get('tool')} (approval {waiting.get('approval_id')})"
    if waiting.get("kind") == "release":
        return str(waiting.get("question"))
    return json.dumps(waiting, default=str)


def link_footer(url: str) -> Text:
    return Text(f"a run's page: {console_link(url, '<run id>')}", style="dim")


def runs_table(runs: Iterable[Mapping[str, Any]], url: str, width: int = WIDE) -> Table:
    """`ticketiq runs list`: one row a run, newest first; each id links to its console page."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", no_wrap=True, min_width=36)
    wide = width >= WIDE
    names = ("AGENT", "STATUS", "CHANNEL", "BY", "CREATED", "ATTEMPT", "LOSSES", "STEPS", "WAITING FOR")
    for name in names if wide else ("STATUS", "RUN"):
        table.add_column(name, overflow="fold")
    for run in runs:
        run_id, status, waiting = str(run["id"]), str(run["status"]), run.get("waiting_for")
        linked = cell(run_id, f"link {console_link(url, run_id)}")
        if wide:
            table.add_row(
                linked, cell(run.get("agent")), status_cell(status), cell(run.get("channel")),
                cell(run.get("created_by")), cell(when(run.get("created_at"))), cell(run.get("attempt")),
                cell(run.get("losses")), cell(run.get("steps")), cell(waiting_text(waiting)),
            )  # fmt: skip
            continue
        what = (f"{run.get('agent')} · {run.get('channel')} · by {run.get('created_by')} · "
                f"{when(run.get('created_at'))} · attempt {run.get('attempt')}, {run.get('losses')} lost, "
                f"{run.get('steps')} steps")  # fmt: skip
        if waiting:
            what += f"\nwaits for {waiting_text(waiting)}"
        table.add_row(linked, status_cell(status), cell(what))
    return table


def run_grid(run: Mapping[str, Any], url: str) -> Table:
    """The run itself, one field a line."""
    grid = Table(box=None, show_header=False, pad_edge=False, title="run", title_justify="left", title_style="bold")
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    ended = run.get("finished_at") or run.get("updated_at")
    rows: list[tuple[str, Any]] = [
        ("id", run.get("id")), ("page", console_link(url, str(run.get("id")))), ("agent", run.get("agent")),
        ("channel", run.get("channel")), ("created by", run.get("created_by")),
        ("created", when(run.get("created_at"))), ("ended" if run.get("finished_at") else "updated", when(ended)),
        ("attempt", run.get("attempt")), ("losses", run.get("losses")), ("steps", run.get("steps")),
    ]  # fmt: skip
    grid.add_row("status", status_cell(str(run.get("status"))))
    for name, value in rows:
        grid.add_row(name, cell(value))
    if run.get("status") == "waiting":
        for waiting in run.get("waiting_for_all") or [run.get("waiting_for")]:
            grid.add_row("waiting for", cell(waiting_text(waiting)))
    if run.get("answer") is not None:
        grid.add_row("answer", cell(run["answer"]))
    if run.get("error"):
        grid.add_row("error", cell(run["error"], "red"))
    return grid


def origin_of(timeline: Mapping[str, Any]) -> datetime | None:
    """The instant the offsets count from: the first attempt's start, else the run's creation."""
    for attempt in timeline.get("attempts") or []:
        at = parse_time(attempt.get("started_at"))
        if at is not None:
            return at
    return parse_time((timeline.get("run") or {}).get("created_at"))


def settled_text(settled: Iterable[Mapping[str, Any]]) -> str:
    """What a takeover did with each call the lost attempt left (the `crash_resumed` vocabulary)."""
    return "\n".join(f"#{s.get('idx')} {s.get('tool')} (step {s.get('step')}): {s.get('route')} -> {s.get('happened')}"
                     for s in settled) or "-"  # fmt: skip


def attempts_table(attempts: Iterable[Mapping[str, Any]], origin: datetime | None) -> Table:
    """The recovery timeline: each attempt, the process that held it, how it ended, and for one taken
    over, how long the takeover took and what it did with each call left in flight."""
    table = Table(title="attempts", title_justify="left", title_style="bold", header_style="bold",
                  box=box.SIMPLE_HEAVY)  # fmt: skip
    for name in ("#", "PROCESS", "STARTED", "ENDED", "HOW", "LOSS SEEN", "TAKEN AFTER", "CALLS LEFT IN FLIGHT"):
        table.add_column(name, overflow="fold")
    for a in attempts:
        taken = a.get("taken_after_s")
        ended = a.get("ended") or "running"
        table.add_row(
            cell(a.get("attempt")), cell(a.get("process")), cell(since(origin, a.get("started_at"))),
            cell(since(origin, a.get("ended_at"))), cell(ended, "red" if ended in ("lost", "stalled") else ""),
            cell(since(origin, a.get("lost_detected_at"))),
            cell(span(taken) if isinstance(taken, int | float) else None), cell(settled_text(a.get("settled") or [])),
        )  # fmt: skip
    return table


def steps_table(steps: Iterable[Mapping[str, Any]], origin: datetime | None) -> Table:
    """The step waterfall: when each step began, how long it took, the model's part and its calls."""
    table = Table(title="steps", title_justify="left", title_style="bold", header_style="bold", box=box.SIMPLE_HEAVY)
    for name in ("STEP", "ATTEMPT", "STARTED", "TOOK", "MODEL", "CALLS"):
        table.add_column(name)
    for s in steps:
        model = s.get("model_ms")
        calls = ", ".join(_tool_took(c) for c in s.get("calls") or []) or "-"
        table.add_row(
            cell(s.get("step")), cell(s.get("attempt")), cell(since(origin, s.get("started_at"))),
            cell(took(s.get("started_at"), s.get("ended_at"))),
            cell(f"{model:.0f} ms" if isinstance(model, int | float) else None), cell(calls),
        )  # fmt: skip
    return table


def _tool_took(call: Mapping[str, Any]) -> str:
    spent = call_took(call)
    return str(call.get("tool")) if spent == "-" else f"{call.get('tool')} {spent}"


def call_took(call: Mapping[str, Any]) -> str:
    """A call's own time: from its send (or its in-doubt mark) to its outcome."""
    return took(call.get("sent_at") or call.get("marked_at"), call.get("outcome_at"))


def settlement_text(settled: Mapping[str, Any] | None) -> str:
    if not settled:
        return "-"
    return f"by attempt {settled.get('by_attempt')}: {settled.get('happened')} at {clock(settled.get('at'))}"


def calls_table(steps: Iterable[Mapping[str, Any]], origin: datetime | None) -> Table:
    """The write ledger: every call with its key, in-doubt mark, send, outcome and settlement."""
    calls = [(s, c) for s in steps for c in s.get("calls") or []]
    table = Table(title="calls", title_justify="left", title_style="bold", header_style="bold", box=box.SIMPLE_HEAVY)
    for name in ("STEP", "CALL", "KEY", "MARKED / SENT / OUTCOME", "OUTCOME", "SETTLED"):
        table.add_column(name, overflow="fold")
    for s, c in calls:
        outcome, status, spent = c.get("outcome"), c.get("status"), call_took(c)
        times = "\n".join(since(origin, c.get(k)) for k in ("marked_at", "sent_at", "outcome_at"))
        shown = f"{outcome or '-'}" + (f" in {spent}" if spent != "-" else "") + f"\n{status}"
        settled = settlement_text(c.get("settled"))
        if c.get("approval_id"):
            settled += f"\napproval {c['approval_id']}"
        table.add_row(
            cell(s.get("step")), cell(f"#{c.get('idx')} {c.get('tool')}\n[{c.get('class')}]"), cell(c.get("key")),
            cell(times), cell(shown, "green" if outcome == "ok" else "red" if outcome in ("error", "unknown") else
                              "yellow" if status == "in_doubt" else ""),
            cell(settled),
        )  # fmt: skip
    return table


def approvals_table(approvals: Iterable[Mapping[str, Any]], url: str, width: int = WIDE) -> Table:
    """`ticketiq approvals list`: the calls held for a person's decision."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", no_wrap=True, min_width=36)
    wide = width >= WIDE
    if wide:
        table.add_column("RUN", no_wrap=True, min_width=36)
    names = ("STEP", "TOOL", "ARGS", "STATUS", "ASKED", "DECIDED BY", "REASON")
    for name in names if wide else ("STATUS", "CALL"):
        table.add_column(name, overflow="fold", no_wrap=name == "ASKED")
    for a in approvals:
        run_id = str(a.get("run_id"))
        args = json.dumps(a.get("args"), sort_keys=True, default=str)
        status, decided = status_cell(str(a.get("status"))), a.get("decided_by")
        if wide:
            table.add_row(
                cell(a.get("id")), cell(run_id, f"link {console_link(url, run_id)}"), cell(a.get("step")),
                cell(a.get("tool")), cell(args), status, cell(when(a.get("created_at"))), cell(decided),
                cell(a.get("reason")),
            )  # fmt: skip
            continue
        ids = Text.assemble(cell(a.get("id")), "\nrun\n", cell(run_id, f"link {console_link(url, run_id)}"))
        call = f"{a.get('tool')} {args}\nstep {a.get('step')}, asked {when(a.get('created_at'))}"
        if decided:
            call += f"\ndecided by {decided}" + (f": {a.get('reason')}" if a.get("reason") else "")
        elif a.get("reason"):  # withdrawn with its run: how the run ended
            call += f"\n{a.get('reason')}"
        table.add_row(ids, status, cell(call))
    return table


class EventLines:
    """`ticketiq runs watch`: one readable line per event of GET /v1/runs/{id}/events. A step or attempt
    is sent again when it changes, and a stream followed again after a cut starts over: a line already
    printed for the same thing is not printed twice."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, Any], str] = {}

    def line(self, event: str, data: Mapping[str, Any]) -> str | None:
        key, text = _event_text(event, data)
        if text is None or self.shown.get(key) == text:
            return None
        self.shown[key] = text
        return safe(text)


def _event_text(event: str, data: Mapping[str, Any]) -> tuple[tuple[str, Any], str | None]:
    if event == "status":
        return ("status", None), f"status   {data.get('status')} (attempt {data.get('attempt')})"
    if event == "attempt":
        parts = [f"attempt  {data.get('attempt')} on {data.get('process')}, started {clock(data.get('started_at'))}"]
        if data.get("ended"):
            parts.append(f"ended {data['ended']} at {clock(data.get('ended_at'))}")
        if data.get("lost_detected_at"):
            parts.append(f"loss seen at {clock(data['lost_detected_at'])}")
        if isinstance(data.get("taken_after_s"), int | float):
            parts.append(f"taken after {span(data['taken_after_s'])}")
        text = "; ".join(parts)
        settled = data.get("settled") or []
        if settled:
            text += "\n" + "\n".join(f"         {line}" for line in settled_text(settled).splitlines())
        return ("attempt", data.get("attempt")), text
    if event == "step":
        model = data.get("model_ms")
        head = f"step {data.get('step')}   attempt {data.get('attempt')}, started {clock(data.get('started_at'))}"
        if data.get("ended_at"):
            head += f", took {took(data.get('started_at'), data.get('ended_at'))}"
        if isinstance(model, int | float):
            head += f", model {model:.0f} ms"
        calls = [_call_line(c) for c in data.get("calls") or []]
        return ("step", data.get("step")), "\n".join([head, *calls])
    if event == "end":
        return ("end", None), f"end      run {data.get('id')} {data.get('status')}"
    return (event, json.dumps(data, sort_keys=True, default=str)), None


def _call_line(call: Mapping[str, Any]) -> str:
    line = f"         #{call.get('idx')} {call.get('tool')} [{call.get('class')}]"
    if call.get("key"):
        line += f" key={call['key']}"
    line += f": {call.get('status')}"
    if call.get("outcome"):
        spent = call_took(call)
        line += f", {call['outcome']}" + (f" in {spent}" if spent != "-" else "")
    if call.get("settled"):
        line += f", settled {settlement_text(call['settled'])}"
    if call.get("approval_id"):
        line += f", approval {call['approval_id']}"
    return line
