"""`ticketiq demo`: an embedded Postgres, the stand-ins and one app process; the triage agent run end to
end, each step printed as it happens, then the answer and `run <id>: succeeded`.

The API takes a bearer token: the demo makes an operator token in its database first, sends it with its
own requests and prints how to use it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ticketiq.engine import tokens
from ticketiq.engine.tokens import Role
from ticketiq.errors import TicketIQError
from ticketiq.launch import Child, start_serve, start_standins
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
            if run["status"] in ("succeeded", "failed", "interrupted") and not entries:
                return run
            if time.monotonic() > deadline:
                return run
            time.sleep(0.1)


def run_demo(settings: Settings) -> int:
    target = database.resolve(settings)
    children: list[Child] = []
    logs = Path(tempfile.mkdtemp(prefix="ticketiq-demo-"))
    try:
        env = {**os.environ, "TICKETIQ_DATABASE_URL": target.url}
        print(f"database  {target.url}  (logs in {logs})", flush=True)
        standins = start_standins(env, logs)
        children.append(standins)
        print(f"stand-ins pid {standins.pid}: {standins.env['TICKETIQ_MODEL_BASE_URL']}", flush=True)
        app, base = start_serve({**env, **standins.env}, logs)
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
        standin = standins.env["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")
        writes: list[dict[str, Any]] = httpx.get(f"{standin}/_standin/writes", timeout=10.0).json()
        applied = [w for w in writes if w["effect"] == "applied"]
        print(f"vendor writes the stand-ins took: {len(applied)} ({', '.join(w['vendor'] for w in applied)})")
    finally:
        for child in reversed(children):
            child.stop()
        target.release()
    # Last, after everything was stopped: the line that says how the run ended.
    print(f"run {run_id}: {run['status']}", flush=True)
    return 0 if run["status"] == "succeeded" else 1
