"""`ticketiq runs list|show|watch|stop|resume|input` and `ticketiq approvals list|approve|reject`: runs and
approvals over the HTTP API, at `--url` (default TICKETIQ_URL) with `--token` (default TICKETIQ_TOKEN).

Every run id printed comes with its console page, `<url>/console/runs/<id>`. `runs watch` follows the
run's events (GET /v1/runs/{id}/events) until it ends and exits 0 when it succeeded, 1 otherwise; a
stream closed or cut before the end (its time was up, the process serving it died, the edge dropped it)
is followed again, from the id of the last event it sent (`Last-Event-ID`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rich.console import Console
from rich.text import Text

from ticketiq.cli import render
from ticketiq.cli.client import ONCE, Failed, Target, checked_id, client, console_link, failed, said
from ticketiq.client import Client, ClientError
from ticketiq.settings import Settings

# A watch whose stream keeps being cut looks this many times (0.5 s, 1 s, ... up to 5 s apart: about a
# minute) before it gives up: long enough for a takeover behind the edge, short enough to say so.
FOLLOW_AGAIN = 15


def _run_id(value: str) -> str:
    return checked_id(value, "run_id", "a run id", "POST /v1/runs")


def _approval_id(value: str) -> str:
    return checked_id(value, "approval_id", "an approval id", "GET /v1/approvals")


def _say(console: Console, text: str) -> None:
    """One message of ours holding values from outside: printed as text, never as markup or controls."""
    console.print(render.safe(text), markup=False, highlight=False, soft_wrap=True)


def _print_json(body: Any) -> None:
    print(json.dumps(body, indent=2, ensure_ascii=False))


def runs_command(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    target = Target.of(args.api_url, args.api_token, settings)
    action = {"list": runs_list, "show": runs_show, "watch": runs_watch, "stop": runs_stop, "input": runs_input,
              "resume": runs_resume}  # fmt: skip
    with said(target):
        return action[args.action](target, args, console)


def approvals_command(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    target = Target.of(args.api_url, args.api_token, settings)
    with said(target):
        if args.action == "list":
            return approvals_list(target, args, console)
        return decide(target, args, console)


def runs_list(target: Target, args: argparse.Namespace, console: Console) -> int:
    query = {"status": args.status or None, "agent": args.agent, "channel": args.channel,
             "created_by": args.created_by, "since": args.since, "until": args.until, "q": args.search,
             "limit": args.limit}  # fmt: skip
    with client(target) as api:
        page = api.runs_page(args.cursor, **query)
    if args.json:
        _print_json(page)
        return 0
    console.print(render.runs_table(page["runs"], target.url, console.width))
    if page.get("next_cursor"):
        console.print(Text(f"more: the same command with --cursor {page['next_cursor']}", "dim"))
    if page["runs"]:
        console.print(render.link_footer(target.url))
    else:
        console.print("no runs match", highlight=False)
    return 0


def runs_show(target: Target, args: argparse.Namespace, console: Console) -> int:
    run_id = _run_id(args.run_id)
    with client(target) as api:
        timeline = api.timeline(run_id)
    if args.json:
        _print_json(timeline)
        return 0
    origin = render.origin_of(timeline)
    console.print(render.run_grid(timeline["run"], target.url))
    if origin is not None:
        console.print(Text(f"times below: from the first attempt's start, {render.when(origin.isoformat())}",
                                  "dim"))  # fmt: skip
    console.print(render.attempts_table(timeline.get("attempts") or [], origin))
    console.print(render.steps_table(timeline.get("steps") or [], origin))
    console.print(render.calls_table(timeline.get("steps") or [], origin))
    return 0


def runs_watch(target: Target, args: argparse.Namespace, console: Console) -> int:
    run_id = _run_id(args.run_id)
    lines = render.EventLines()

    def say(text: str) -> None:
        _say(console, text)

    say(f"following run {run_id}: {console_link(target.url, run_id)}")
    with client(target, retries=ONCE) as api:
        cuts = 0
        last_id: str | None = None
        while True:
            try:
                with api.events(run_id, last_id) as events:
                    for event in events:
                        cuts = 0
                        shown = lines.line(event.event, event.data)
                        if shown is not None:
                            say(shown)
                        if event.event == "end":
                            return _ended(str(event.data.get("status")), run_id, target, say)
                    last_id = events.told.last_id or last_id
                if events.told.all_told:
                    status = _status_now(api, run_id)
                    return _ended(str(status), run_id, target, say)
                if not events.told.cut and last_id is not None:
                    # Closed before the end (a stream lasts TICKETIQ_STREAM_MAX_S): followed on from its
                    # last id, nothing told twice.
                    time.sleep(events.told.retry_s)
                    continue
            except ClientError as exc:
                if not failed(exc) or (cuts == 0 and not lines.shown):
                    raise  # never reached: say so now, naming the URL
            # Cut before the end: the run may have ended meanwhile, else follow it again.
            cuts += 1
            status = _status_now(api, run_id)
            if status in render.ENDED:
                say(f"end      run {run_id} {status}")
                return _ended(status, run_id, target, say)
            if cuts > FOLLOW_AGAIN:
                raise Failed(f"the events of run {run_id} were cut {cuts} times; the run is {status or 'unknown'}: "
                             f"`ticketiq runs watch {run_id}` follows it again")  # fmt: skip
            say(f"(the event stream was cut; following again, run {status or 'unknown'})")
            time.sleep(min(0.5 * cuts, 5.0))


def _status_now(api: Client, run_id: str) -> str | None:
    try:
        return api.run(run_id)["status"]
    except ClientError as exc:
        if not failed(exc):
            raise
        return None  # the API is between processes: the next look tells


def _ended(status: str, run_id: str, target: Target, say: Any) -> int:
    say(f"run {run_id}: {status}  {console_link(target.url, run_id)}")
    return 0 if status == "succeeded" else 1


def runs_stop(target: Target, args: argparse.Namespace, console: Console) -> int:
    run_id = _run_id(args.run_id)
    with client(target) as api:
        stopped = api.stop(run_id)
    _say(console, f"stop requested for run {run_id}; its status now: {stopped.get('status')} (a running run stops at "
         f"its next gate check)\n{console_link(target.url, run_id)}")  # fmt: skip
    return 0


def runs_resume(target: Target, args: argparse.Namespace, console: Console) -> int:
    """I24: a restored run waiting for an operator goes on; the writes it held are sent (the risk is yours)."""
    run_id = _run_id(args.run_id)
    with client(target) as api:
        resumed = api.resume(run_id, args.reason)
    _say(console, f"run {run_id} resumed: {resumed.get('writes_released')} held writes sent as it goes on; its status "
         f"now: {resumed.get('status')}\n{console_link(target.url, run_id)}")  # fmt: skip
    return 0


def runs_input(target: Target, args: argparse.Namespace, console: Console) -> int:
    """The input a waiting run asked for: for the question named (`--question`), else for its oldest
    pending question, bound to an Idempotency-Key made here (so the same request sent again answers
    no other question)."""
    run_id = _run_id(args.run_id)
    question = None
    if args.question:
        question = checked_id(args.question, "question_id", "a question id", f"GET /v1/runs/{run_id}")
    with client(target) as api:
        given = api.give_input(run_id, args.text, question)
    _say(console, f"input given to run {run_id} for question {given.get('question_id')}; the run is "
         f"{given.get('status')} now\n{console_link(target.url, run_id)}")  # fmt: skip
    return 0


def approvals_list(target: Target, args: argparse.Namespace, console: Console) -> int:
    with client(target) as api:
        found = api.approvals(args.status, args.limit)
    if args.json:
        _print_json({"approvals": found})
        return 0
    console.print(render.approvals_table(found, target.url, console.width))
    if found:
        console.print(render.link_footer(target.url))
    else:
        console.print(f"no {args.status} approvals", highlight=False)
    return 0


def decide(target: Target, args: argparse.Namespace, console: Console) -> int:
    """Approve or reject one held call; the waiting run goes on. The Idempotency-Key made here lets a
    retry of this very request find the decision it made."""
    approval_id = _approval_id(args.approval_id)
    decision = "approve" if args.action == "approve" else "reject"
    with client(target) as api:
        decided = api.decide(approval_id, decision == "approve", args.reason)
    run_id = str(decided.get("run_id"))
    _say(console, f"{decided.get('status')}: {decided.get('tool')} of run {run_id} (approval {approval_id}, decided "
         f"by {decided.get('decided_by')}); the run goes on\n{console_link(target.url, run_id)}")  # fmt: skip
    return 0
