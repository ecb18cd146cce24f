"""`ticketiq demo`: an embedded Postgres, the stand-ins and one app process; the triage agent run end to
end, each step printed as it happens, then the answer and `run <id>: succeeded`. Then each entry point
once: a co-pilot turn, an A2A task (JSON-RPC `SendMessage`), and a run that waits for a person's input
and goes on with it. With `--keep` the services stay up for the examples of docs/entry-points.md until Ctrl-C.

The API takes a bearer token: the demo makes an operator token in its database first, sends it with its
own requests and prints how to use it. The token lives as long as the demo: it is revoked when the demo
ends (with `--keep`, when the kept app is stopped), however it ends but SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Role
from ticketiq.cli.client import console_link
from ticketiq.dbserver.authentication import without_password
from ticketiq.dbserver.target import resolve
from ticketiq.errors import TicketIQError
from ticketiq.operate.launch import Child, start_serve, start_standins
from ticketiq.settings import Settings
from ticketiq.storage import database
from ticketiq.storage.token_store import TokenStore

DEMO_INPUT = "Triage OPS-123: checkout requests fail with 502 since the last deploy"


def describe(entry: dict[str, Any]) -> str | None:
    """One transcript entry as the line the demo prints."""
    kind = entry["kind"]
    if kind == "input":
        return f"input    {entry['agent']}: {entry['input']}"
    if kind == "model_step":
        calls = ", ".join(f"{c['tool']} [{c['class']}] key={c['key'] or 'none'}" for c in entry["calls"])
        return f"step {entry['step']:<3} model asked for {len(entry['calls'])} call(s): {calls}"
    if kind == "gate":
        reason = f" ({entry['reason']})" if entry.get("reason") else ""
        return f"         gate {entry['tool']}: {entry['verdict']}{reason}"
    if kind == "statement":
        what = entry["what"]
        detail = f" {entry['tool']} key={entry['key']}" if what == "in_doubt" else ""
        detail = f" {entry['tool']}" if what == "outcome" else detail
        return f"         wrote {what}{detail} (1 statement)"
    if kind == "call":
        result = json.dumps(entry.get("result"), default=str)[:120]
        verdict = "ok" if entry["ok"] else "failed"
        return f"         {entry['tool']} -> {verdict} ({entry['how']}): {result}"
    if kind == "answer":
        return f"answer   {entry['text']}"
    if kind == "error":
        return f"error    {entry['reason']}"
    if kind in ("approval", "waiting"):
        shown = {k: v for k, v in entry.items() if k not in ("id", "at", "kind")}
        return f"         {kind}: {json.dumps(shown)}"
    return None


def make_token(url: str, settings: Settings) -> tuple[str, str]:
    """An operator token for the demo (a fresh name each time: names are never reused); its name and
    the token."""
    name = f"demo-{secrets.token_hex(4)}"
    token = tokens.mint()

    async def save() -> None:
        async with TokenStore.opened(url, database.ConnectionLimits.from_settings(settings)) as store:
            if await store.create(name, Role.OPERATOR.value, None, tokens.token_hash(token), "demo") is None:
                raise TicketIQError(f"a token named {name} exists already; run the demo again")

    asyncio.run(save())
    return name, token


def revoke_token(url: str, settings: Settings, name: str) -> str:
    """Revoke the demo's token; the line that says so, or what to do when it could not be (the database
    gone): a token left valid is an operator's key to whatever this database serves next."""

    async def revoke() -> None:
        async with TokenStore.opened(url, database.ConnectionLimits.from_settings(settings)) as store:
            if await store.revoke(name, "demo") is None and (await store.get(name)) is None:
                raise TicketIQError(f"no token named {name}")

    try:
        asyncio.run(revoke())
    except (TicketIQError, OSError) as exc:
        return (f"token     {name} was NOT revoked ({exc}); revoke it with `ticketiq tokens revoke --name {name}` "
                "against the demo's database (the `database` line above)")  # fmt: skip
    return f"token     {name} revoked: the demo is over, requests with it are refused"


def step_keys(entries: list[dict[str, Any]]) -> set[str]:
    """The keys the run's calls were sent with, from its transcript."""
    return {c["key"] for e in entries if e.get("kind") == "model_step" for c in e.get("calls", []) if c.get("key")}


def own_writes(writes: list[dict[str, Any]], keys: set[str]) -> list[dict[str, Any]]:
    """The writes the stand-ins took for this run: by its calls' keys. The stand-ins keep every write in
    the database, so a second demo on the same home sees the first one's too."""
    return [w for w in writes if w["effect"] == "applied" and w.get("key") in keys]


def follow(base: str, run_id: str, token: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Print the run's transcript as it grows; return the run once it ended."""
    seen = 0
    deadline = time.monotonic() + timeout_s
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, timeout=10.0, headers=auth) as client:
        while True:
            entries = client.get(f"/v1/runs/{run_id}/transcript", params={"after": seen}).json()["entries"]
            for entry in entries:
                seen = entry["id"]
                line = describe(entry)
                if line:
                    print(line, flush=True)
            run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
            if run["status"] in ("succeeded", "failed", "interrupted", "stopped") and not entries:
                return run
            if time.monotonic() > deadline:
                return run
            time.sleep(0.1)


def entry_points(base: str, token: str) -> bool:
    """Each entry point once, as a client would use it; True when every one answered as it should."""
    auth = {"Authorization": f"Bearer {token}"}
    ok = True
    with httpx.Client(base_url=base, timeout=60.0, headers=auth) as client:
        turn = client.post("/v1/copilot/turns", json={"agent": "reader", "ticket": "OPS-125",
                                                      "question": "what is this ticket about?"})  # fmt: skip
        shown = turn.json()
        print(f"co-pilot  {turn.status_code}: {shown.get('answer') or shown}", flush=True)
        ok = ok and turn.status_code == 200 and shown.get("status") == "succeeded"
        card = client.get("/.well-known/agent-card.json").json()
        print(f"a2a card  {card['name']}: skills {', '.join(s['id'] for s in card['skills'])}", flush=True)
        sent = client.post("/a2a", headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": f"demo-{secrets.token_hex(4)}", "role": "ROLE_USER",
                            "parts": [{"text": "Read OPS-126"}], "metadata": {"agent": "reader"}},
                "configuration": {"returnImmediately": False}}})  # fmt: skip
        task = sent.json().get("result", {}).get("task", {})
        artifact = [p.get("text") for a in task.get("artifacts", []) for p in a.get("parts", [])]
        print(f"a2a task  {task.get('id')}: {task.get('status', {}).get('state')} {artifact}", flush=True)
        ok = ok and task.get("status", {}).get("state") == "TASK_STATE_COMPLETED"
        asked = client.post("/v1/runs", json={"agent": "asker", "input": "Note OPS-127"}).json()["id"]
        waiting = _until(client, asked, ("waiting", "failed"))
        print(f"waiting   run {asked}: {waiting['status']} for input", flush=True)
        # The input names the question it answers (I18), as GET /v1/runs/{id} lists it.
        question = next((w["question_id"] for w in waiting.get("waiting_for_all", []) if w["kind"] == "input"), None)
        given = client.post(f"/v1/runs/{asked}/input", json={"text": "staging", "question_id": question})
        ended = _until(client, asked, ("succeeded", "failed"))
        print(f"input     {given.status_code}; run {asked}: {ended['status']}: {ended['answer']}", flush=True)
        ok = ok and ended["status"] == "succeeded"
    return ok


def _until(client: httpx.Client, run_id: str, statuses: tuple[str, ...], timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run: dict[str, Any] = client.get(f"/v1/runs/{run_id}").json()
        if run["status"] in statuses or time.monotonic() > deadline:
            return run
        time.sleep(0.1)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_demo(settings: Settings, keep: bool = False, port: int | None = None) -> int:
    target = resolve(settings)
    children: list[Child] = []
    name: str | None = None  # the demo's token, once made
    logs = Path(tempfile.mkdtemp(prefix="ticketiq-demo-"))
    # Ctrl-C, or SIGTERM (a background job ignores SIGINT), at any moment stops the stand-ins and the app
    # through the `finally`: a demo ended by a signal leaves no process of its own behind.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        env = {**os.environ, "TICKETIQ_DATABASE_URL": target.url}
        print(f"database  {without_password(target.url)}  (logs in {logs})", flush=True)
        standins = start_standins(env, logs)
        children.append(standins)
        print(f"stand-ins pid {standins.pid}: {standins.env['TICKETIQ_MODEL_BASE_URL']}", flush=True)
        app, base = start_serve({**env, **standins.env}, logs, port=port)
        children.append(app)
        print(f"app       pid {app.pid}: {base}", flush=True)
        name, token = make_token(target.url, settings)
        print(f"token     {name} (operator), shown this once; to use it while the app runs:", flush=True)
        print(f"          export TICKETIQ_TOKEN={token}", flush=True)
        print(f'          curl -s {base}/v1/runs -H "Authorization: Bearer $TICKETIQ_TOKEN" '
              """-H 'content-type: application/json' -d '{"agent": "triage", "input": "Triage OPS-124"}'""",
              flush=True)  # fmt: skip
        created = httpx.post(f"{base}/v1/runs", json={"agent": "triage", "input": DEMO_INPUT},
                             headers={"Authorization": f"Bearer {token}"}, timeout=10.0)  # fmt: skip
        created.raise_for_status()
        run_id = created.json()["id"]
        run = follow(base, run_id, token)
        print(f"          {console_link(base, run_id)}", flush=True)
        standin = standins.env["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")
        writes: list[dict[str, Any]] = httpx.get(f"{standin}/_standin/writes", timeout=10.0).json()
        transcript = httpx.get(f"{base}/v1/runs/{run_id}/transcript", params={"limit": 1000}, timeout=10.0,
                               headers={"Authorization": f"Bearer {token}"}).json()  # fmt: skip
        applied = own_writes(writes, step_keys(transcript["entries"]))
        print(f"vendor writes the stand-ins took for run {run_id}: {len(applied)} "
              f"({', '.join(w['vendor'] for w in applied)})")  # fmt: skip
        entries_ok = entry_points(base, token)
        if keep:
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C or SIGTERM: the end of a kept demo
                print(f"kept running: the app at {base}, the stand-ins at {standin}; Ctrl-C stops them", flush=True)
                print("          for the examples of docs/entry-points.md and the CLI, in another shell:", flush=True)
                print(f"          export TICKETIQ_URL={base} TICKETIQ_TOKEN={token}", flush=True)
                print(f"          S={standin}   # the stand-ins", flush=True)
                while app.alive() and standins.alive():
                    time.sleep(0.5)
    finally:
        for child in reversed(children):
            child.stop()
        if name is not None:  # before the database it is kept in may stop
            print(revoke_token(target.url, settings, name), flush=True)
        target.release()
    # Last, after everything was stopped: the line that says how the run ended.
    print(f"entry points: {'all answered' if entries_ok else 'NOT all answered (see above)'}", flush=True)
    print(f"run {run_id}: {run['status']}", flush=True)
    return 0 if run["status"] == "succeeded" and entries_ok else 1
