"""What `ticketiq runs` and `ticketiq approvals` print (cli/render.py), and how the API's answers turn
into the CLI's messages and exit codes (cli/client.py), from the API's JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rich.console import Console

from ticketiq.cli import render
from ticketiq.cli.client import Failed, Target, checked_id, console_link, refusal
from ticketiq.client import ApiError
from ticketiq.client import errors as client_errors
from ticketiq.errors import ConfigError, NotFound, RequestError
from ticketiq.settings import Settings

URL = "http://127.0.0.1:8080"
RUN = "6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10"


def shown(*renderables: Any) -> str:
    console = Console(record=True, width=400, color_system=None)
    for r in renderables:
        console.print(r)
    return console.export_text()


def call(**changes: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "idx": 0, "tool": "jira_add_comment", "class": "write", "key": "tk-1",
        "marked_at": "2026-05-01T12:00:01.000+00:00", "sent_at": "2026-05-01T12:00:01.010+00:00",
        "outcome_at": "2026-05-01T12:00:01.050+00:00", "outcome": "ok", "status": "done", "settled": None,
        "approval_id": None,
    }  # fmt: skip
    return {**made, **changes}


def test_text_from_outside_is_shown_never_obeyed() -> None:
    hostile = "[red]x[/red] \x1b[2J\x07 \u202eevil\n\tnext"
    assert render.safe(hostile) == "[red]x[/red] \\x1b[2J\\x07 \\u202eevil\n\tnext"
    run = {"id": RUN, "agent": "triage", "status": "waiting", "waiting_for": {"kind": "input", "question": hostile,
                                                                              "question_id": "q1"}}  # fmt: skip
    out = shown(render.runs_table([run], URL))
    assert "[red]x[/red] \\x1b[2J" in out  # the markup is text, the escape is visible
    assert "\x1b" not in out and "\u202e" not in out


def test_times_are_offsets_and_durations() -> None:
    origin = render.parse_time("2026-05-01T12:00:00+00:00")
    assert render.since(origin, "2026-05-01T12:00:01.2+00:00") == "+1.200 s"
    assert render.since(None, "2026-05-01T14:00:01.2+02:00") == "12:00:01.200"
    assert render.took("2026-05-01T12:00:00+00:00", "2026-05-01T12:00:00.04+00:00") == "40 ms"
    assert render.took("2026-05-01T12:00:00+00:00", "2026-05-01T12:00:02.5+00:00") == "2.50 s"
    assert render.took(None, "2026-05-01T12:00:00+00:00") == "-"
    assert render.when("2026-05-01T14:00:01+02:00") == "2026-05-01 12:00:01Z"
    assert render.call_took(call()) == "40 ms"  # from the send, not the mark
    assert render.call_took(call(sent_at=None)) == "50 ms"  # never sent: from its in-doubt mark


def test_waiting_for_says_what_the_run_waits_for() -> None:
    assert render.waiting_text(None) == "-"
    assert render.waiting_text({"kind": "input", "question": "Which env?", "question_id": "q1"}) == (
        "input: Which env? (question q1)"
    )
    assert render.waiting_text({"kind": "approval", "approval_id": "a1", "tool": "jira_transition",
                                "question": "?"}) == "approval of jira_transition (approval a1)"  # fmt: skip


def test_the_list_links_each_run_to_its_console_page() -> None:
    table = render.runs_table([{"id": RUN, "agent": "triage", "status": "succeeded", "channel": "api",
                                "created_by": "ana", "created_at": "2026-05-01T12:00:00+00:00", "attempt": 2,
                                "losses": 1, "steps": 3, "waiting_for": None}], URL)  # fmt: skip
    out = shown(table)
    assert RUN in out and "succeeded" in out and "2026-05-01 12:00:00Z" in out
    [id_cell] = table.columns[0].cells
    assert str(getattr(id_cell, "style", "")) == f"link {URL}/console/runs/{RUN}"
    assert console_link(URL + "/", RUN) == f"{URL}/console/runs/{RUN}"
    assert f"{URL}/console/runs/<run id>" in shown(render.link_footer(URL))


def test_the_timeline_shows_the_recovery_and_the_settlement_of_each_call() -> None:
    timeline: dict[str, Any] = {
        "run": {"id": RUN, "agent": "triage", "status": "succeeded", "attempt": 2, "losses": 1, "steps": 3,
                "answer": "Triaged OPS-1", "created_at": "2026-05-01T12:00:00+00:00"},
        "attempts": [
            {"attempt": 1, "process": "p-lost", "started_at": "2026-05-01T12:00:00+00:00",
             "ended_at": "2026-05-01T12:00:02+00:00", "ended": "lost",
             "lost_detected_at": "2026-05-01T12:00:02.5+00:00", "taken_after_s": None, "settled": []},
            {"attempt": 2, "process": "p-took", "started_at": "2026-05-01T12:00:03+00:00", "ended_at": None,
             "ended": "finished", "lost_detected_at": None, "taken_after_s": 0.5,
             "settled": [{"idx": 0, "step": 2, "tool": "jira_add_comment", "class": "write", "route": "read_back",
                          "happened": "found"}]},
        ],
        "steps": [{"step": 2, "attempt": 1, "started_at": "2026-05-01T12:00:01+00:00",
                   "ended_at": "2026-05-01T12:00:01.2+00:00", "model_ms": 120,
                   "calls": [call(status="settled", outcome=None, outcome_at=None, settled={
                       "by_attempt": 2, "happened": "found", "at": "2026-05-01T12:00:13+00:00"})]}],
    }  # fmt: skip
    origin = render.origin_of(timeline)
    tables = (render.attempts_table(timeline["attempts"], origin), render.steps_table(timeline["steps"], origin),
              render.calls_table(timeline["steps"], origin))  # fmt: skip
    out = shown(render.run_grid(timeline["run"], URL), *tables)
    assert f"{URL}/console/runs/{RUN}" in out and "Triaged OPS-1" in out
    assert "p-lost" in out and "lost" in out and "+2.500 s" in out  # when the loss was seen
    assert "500 ms" in out  # taken after
    assert "#0 jira_add_comment (step 2): read_back -> found" in out
    assert "120 ms" in out and "200 ms" in out  # the step's model time and its own
    assert "by attempt 2: found at 12:00:13.000" in out
    assert "tk-1" in out and "+1.000 s" in out  # the key and the in-doubt mark


def test_watch_prints_each_change_once() -> None:
    lines = render.EventLines()
    assert lines.line("status", {"id": RUN, "status": "running", "attempt": 1}) == "status   running (attempt 1)"
    assert lines.line("status", {"id": RUN, "status": "running", "attempt": 1}) is None  # followed again
    step = {"step": 1, "attempt": 1, "started_at": "2026-05-01T12:00:00+00:00", "ended_at": None, "model_ms": 5,
            "calls": [call(status="in_doubt", outcome=None, outcome_at=None)]}  # fmt: skip
    first = lines.line("step", step)
    assert first is not None and "#0 jira_add_comment [write] key=tk-1: in_doubt" in first
    assert lines.line("step", step) is None
    done = lines.line("step", {**step, "calls": [call()]})
    assert done is not None and "done, ok in 40 ms" in done  # sent again once it changed
    taken = lines.line("attempt", {"attempt": 2, "process": "p-b", "started_at": "2026-05-01T12:00:03+00:00",
                                   "ended": None, "taken_after_s": 1.5, "settled": [
                                       {"idx": 0, "step": 1, "tool": "jira_add_comment", "route": "read_back",
                                        "happened": "sent_once"}]})  # fmt: skip
    assert taken is not None and "on p-b" in taken and "taken after 1.50 s" in taken and "-> sent_once" in taken
    assert lines.line("end", {"id": RUN, "status": "stopped"}) == f"end      run {RUN} stopped"
    assert lines.line("ping", {}) is None


def answered(status: int, body: Any) -> ApiError:
    """The client's error for a refusal the API answered with this status and body."""
    return client_errors.refusal(status, json.dumps(body).encode(), "")


def field(loc: list[str], msg: str) -> dict[str, Any]:
    return {"detail": [{"loc": loc, "msg": msg}]}


def test_each_refusal_names_the_api_field_and_what_to_change() -> None:
    target = Target(URL, "tiq_x", "--url", "TICKETIQ_TOKEN")
    denied = refusal(answered(403, field(["header", "Authorization"], "token cal may not stop runs")), target)
    assert isinstance(denied, ConfigError)
    assert str(denied) == (f"the API at {URL} refused TICKETIQ_TOKEN (403): header.Authorization: token cal may "
                           "not stop runs")  # fmt: skip
    missing = refusal(answered(404, field(["path", "run_id"], f"no run {RUN}")), target)
    assert isinstance(missing, NotFound) and f"path.run_id: no run {RUN}" in str(missing)
    bad = refusal(answered(422, field(["query", "status"], "no status 'nope'")), target)
    assert type(bad) is RequestError and "query.status: no status 'nope'" in str(bad)
    late = refusal(answered(409, field(["body", "question_id"], "answered already")), target)
    assert isinstance(late, Failed) and "body.question_id: answered already" in str(late)
    down = refusal(answered(503, {"detail": "the database is unavailable; retry"}), target)
    assert isinstance(down, Failed) and "503: the database is unavailable" in str(down)


def test_flags_win_over_the_variables() -> None:
    settings = Settings(url="http://from-env:1", token="tiq_env")
    assert Target.of(None, None, settings) == Target("http://from-env:1", "tiq_env", "TICKETIQ_URL", "TICKETIQ_TOKEN")
    assert Target.of("http://flag:2/", "tiq_flag", settings) == Target("http://flag:2", "tiq_flag", "--url", "--token")


def test_a_malformed_id_is_refused_before_any_request() -> None:
    assert checked_id(RUN.upper(), "run_id", "a run id", "POST /v1/runs") == RUN
    with pytest.raises(RequestError, match="'OPS-1' is not a run id"):
        checked_id("OPS-1", "run_id", "a run id", "POST /v1/runs")


def test_a_narrow_terminal_gets_every_id_whole_and_the_fields_stacked() -> None:
    waiting = {"kind": "approval", "approval_id": "a-1", "tool": "jira_transition", "question": "?"}
    runs = [{"id": RUN, "agent": "closer", "status": "waiting", "channel": "api", "created_by": "ana",
             "created_at": "2026-05-01T12:00:00+00:00", "attempt": 1, "losses": 0, "steps": 2,
             "waiting_for": waiting}]  # fmt: skip
    approval: dict[str, Any] = {
        "id": "b91bdaa9-480d-4535-9c8c-13eed1ba73ae", "run_id": RUN, "step": 2, "tool": "jira_transition",
        "args": {"issue_key": "OPS-9", "transition": "Done"}, "status": "pending",
        "created_at": "2026-05-01T12:00:00+00:00", "decided_by": None, "reason": None,
    }  # fmt: skip
    console = Console(record=True, width=80, color_system=None)
    console.print(render.runs_table(runs, URL, console.width), render.approvals_table([approval], URL, console.width))
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert RUN in out and approval["id"] in out  # never cut
    assert "approval of jira_transition (approval a-1)" in " ".join(out.split())
    assert '"transition": "Done"' in out and "closer · api · by ana" in out
    # A request withdrawn with its run (issue 32) says how the run ended, though no one decided it.
    withdrawn = {**approval, "status": "withdrawn", "reason": "its run ended (stopped): stopped by ana"}
    console.print(render.approvals_table([withdrawn], URL, console.width))
    assert "its run ended (stopped): stopped by ana" in " ".join(console.export_text().split())
