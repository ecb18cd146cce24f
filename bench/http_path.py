"""The HTTP path: what the stack around a route costs, against a bare Starlette route in the same process.

    .venv/bin/python bench/http_path.py [--requests 4000] [--connections 4] [--rounds 3] [--routes A,B]
                                        [--profile DIR] [--serve-pythonpath PATH] [--json PATH]

One app process is served as `ticketiq serve` serves it (uvicorn, uvloop, httptools, the same app and
settings), with routes in front of it that the stack never sees: `/bare`, a Starlette route answering a
constant JSON body (no middleware, no dependency, no model); `/bare-fastapi`, the same through a FastAPI
app of its own with nothing added (what the framework costs); `/bare-read/{id}`, a Starlette route making
the read `GET /v1/runs/{id}` makes (its one statement, through the same pool), with nothing around it.
Through the whole stack: `/healthz` (a constant answer), `/readyz` (readiness), `GET /v1/runs/{id}` (a
bearer token, a run read) and `GET /v1/runs/{id}?wait=30` of a run that ended. The bench's client writes
raw HTTP/1.1 over `--connections` kept-alive sockets (it costs little CPU, so the app's core is not shared
with an httpx client), `--requests` of each route a round, the routes in turn, `--rounds` times; each
figure is the app process's CPU (utime + stime from /proc) over the requests of that route, per request,
the median of the rounds. The ratios to `/bare` are issue 35's goals (/readyz at most 1.5x, GET a run
at most 2x), measured side by side in one process; `/bare-read` shows what of a GET is its statement.

With `--profile DIR`, py-spy samples the app through one more round of each route and prints its top ten
functions by own time (`profile_app.py`). `--serve-pythonpath PATH` serves another tree's code (a git
worktree of an older commit, for a before and after). It prints figures and asserts none.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from profile_app import Sampler, print_summary, summary
from scale import SEAL_KEYS, cpu_s, create_database, machine
from ticketiq.dbserver import embedded
from ticketiq.operate.launch import Child, free_port, start_standins

ROUTES = ("bare", "bare_fastapi", "bare_read", "healthz", "readyz", "get_run", "get_run_wait")


def serve(port: int) -> None:
    """`ticketiq serve`'s app and server options, with `/bare` in front (the child process's side)."""
    import orjson
    import uvicorn
    from fastapi import FastAPI
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from starlette.types import Receive, Scope, Send

    from ticketiq.entries.api import create_app
    from ticketiq.runtime import interpreter
    from ticketiq.settings import Settings

    async def constant(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def read_run(request: Request) -> Response:
        # The read GET /v1/runs/{id} makes (its one statement), with nothing of the stack around it.
        shown = await full.state.process.views.shown_run(request.path_params["run_id"], None)
        return Response(orjson.dumps(shown), media_type="application/json")

    bare = Starlette(routes=[Route("/bare", constant), Route("/bare-read/{run_id}", read_run)])
    bare_fastapi = FastAPI()

    @bare_fastapi.get("/bare-fastapi")
    async def constant_too() -> dict[str, bool]:
        return {"ok": True}

    full = create_app(Settings.from_env(), watch_stalls=True, freeze_start_up=True)

    async def both(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (scope["path"] == "/bare" or scope["path"].startswith("/bare-read/")):
            await bare(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] == "/bare-fastapi":
            await bare_fastapi(scope, receive, send)
        else:
            await full(scope, receive, send)

    interpreter.name_event_loop_thread()
    uvicorn.run(both, host="127.0.0.1", port=port, log_config=None, access_log=False, loop="uvloop",
                http="httptools")  # fmt: skip


def request_bytes(path: str, token: str | None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Accept: application/json\r\n\r\n".encode()


async def hammer(port: int, request: bytes, count: int, connections: int) -> list[int]:
    """Send `count` requests over kept-alive sockets, one at a time on each; the statuses answered."""
    statuses: list[int] = []
    share = [count // connections + (1 if i < count % connections else 0) for i in range(connections)]

    async def one_socket(n: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for _ in range(n):
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                statuses.append(int(lines[0].split()[1]))
                length = next(int(v) for k, _, v in (line.partition(b":") for line in lines[1:])
                              if k.strip().lower() == b"content-length")  # fmt: skip
                await reader.readexactly(length)
        finally:
            writer.close()

    await asyncio.gather(*(one_socket(n) for n in share if n))
    return statuses


def paths(run_id: str) -> dict[str, str]:
    return {
        "bare": "/bare", "bare_fastapi": "/bare-fastapi", "bare_read": f"/bare-read/{run_id}",
        "healthz": "/healthz", "readyz": "/readyz",
        "get_run": f"/v1/runs/{run_id}", "get_run_wait": f"/v1/runs/{run_id}?wait=30",
    }  # fmt: skip


def measure(pid: int, port: int, token: str, run_id: str, args: argparse.Namespace) -> dict[str, Any]:
    where = paths(run_id)
    routes = [r for r in ROUTES if r in args.routes.split(",")]
    if "bare" not in routes:
        routes.insert(0, "bare")  # every ratio is to it
    per_round: dict[str, list[float]] = {r: [] for r in routes}
    for route in routes:  # warm-up: every code path imported and every cache filled
        asyncio.run(hammer(port, request_bytes(where[route], token), 200, args.connections))
    for _ in range(args.rounds):
        for route in routes:
            before = cpu_s(pid)
            statuses = asyncio.run(hammer(port, request_bytes(where[route], token), args.requests, args.connections))
            used = cpu_s(pid) - before
            wrong = [s for s in statuses if s != 200]
            if wrong:
                raise SystemExit(f"{route}: {len(wrong)} answers were not 200 (first {wrong[0]})")
            per_round[route].append(1000 * used / args.requests)
    ms = {route: round(statistics.median(v), 4) for route, v in per_round.items()}
    return {
        "cpu_ms_per_request": ms,
        "rounds": {route: [round(x, 4) for x in v] for route, v in per_round.items()},
        "ratio_to_bare": {route: round(ms[route] / ms["bare"], 2) for route in routes},
    }


def profile(pid: int, port: int, token: str, run_id: str, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for route in args.profile_routes.split(","):
        with Sampler(pid, args.profile / f"http-{route}.raw") as sampler:
            asyncio.run(
                hammer(port, request_bytes(paths(run_id)[route], token), args.profile_requests, args.connections)
            )
        found = summary(sampler.stacks())
        print(f"  {route}:")
        print_summary(found)
        out[route] = {"samples": found.samples, "functions": found.functions, "packages": found.packages}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=4000, help="requests of each route a round")
    parser.add_argument("--connections", type=int, default=4, help="kept-alive sockets, one request at a time each")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="py-spy each route once more; raw stacks kept in this folder")
    parser.add_argument("--routes", default=",".join(ROUTES), help="routes measured, comma separated")
    parser.add_argument("--profile-routes", default=",".join(ROUTES), help="routes profiled, comma separated")
    parser.add_argument("--profile-requests", type=int, default=20000, help="requests of each route profiled")
    parser.add_argument("--serve-pythonpath", type=Path, help="serve this tree's src (another commit's)")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the child process: serve on this port
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ticketiq-http-") as tmp:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        children: list[Child] = []
        try:
            figures["machine"] = machine(server.url())
            print(f"machine: {figures['machine']}")
            create_database(server.url(), "http_standins")
            create_database(server.url(), "http_app")
            standins = start_standins({**os.environ, "TICKETIQ_DATABASE_URL": server.url("http_standins")},
                                      folder, "--model-latency-ms", "0")  # fmt: skip
            children.append(standins)
            env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
            env.update({k: v for k, v in standins.env.items() if k != "TICKETIQ_DATABASE_URL"})
            env.update({"TICKETIQ_DATABASE_URL": server.url("http_app"), "TICKETIQ_HOME": str(folder / "home"),
                        "TICKETIQ_SEAL_KEYS": SEAL_KEYS, "TICKETIQ_LOG_LEVEL": "WARNING"})  # fmt: skip
            if args.serve_pythonpath:
                env["PYTHONPATH"] = f"{args.serve_pythonpath}{os.pathsep}{Path(__file__).parent}"
            else:
                env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
            token = subprocess.run([sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", "bench",
                                    "--role", "operator"], env=env, capture_output=True, text=True, timeout=120,
                                   check=True).stdout.strip()  # fmt: skip
            port = free_port()
            log = folder / "serve.log"
            with open(log, "ab") as out:
                proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env=env, stdout=out,
                                        stderr=subprocess.STDOUT)  # fmt: skip
            app = Child("serve", proc, log, env)
            children.append(app)
            base = f"http://127.0.0.1:{port}"
            run_id = start_run(base, token, app)
            print(f"app process {app.pid}, one run {run_id}; {args.requests} requests a route a round over "
                  f"{args.connections} sockets, {args.rounds} rounds:")  # fmt: skip
            figures.update(measure(app.pid, port, token, run_id, args))
            for route in figures["cpu_ms_per_request"]:
                ms = figures["cpu_ms_per_request"][route]
                print(f"  {route:13} {ms:7.4f} ms of app CPU a request, {figures['ratio_to_bare'][route]:5.2f}x the "
                      f"bare route   rounds {figures['rounds'][route]}")  # fmt: skip
            if args.profile is not None:
                print("profile, one more round of each route:")
                figures["profile"] = profile(app.pid, port, token, run_id, args)
        finally:
            for child in reversed(children):
                child.stop()
            embedded.stop(server.home)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


def start_run(base: str, token: str, app: Child) -> str:
    """Wait for the app, then make one `reader` run and wait for its end: the run each GET reads."""
    deadline = time.monotonic() + 90
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while True:
            if not app.alive():
                raise SystemExit(f"the app exited:\n{app.log_tail()}")
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the app was not ready in 90 s:\n{app.log_tail()}")
            time.sleep(0.2)
        made = client.post("/v1/runs", json={"agent": "reader", "input": "Read OPS-1"})
        made.raise_for_status()
        run_id = str(made.json()["id"])
        for _ in range(300):
            if client.get(f"/v1/runs/{run_id}").json()["status"] in ("succeeded", "failed"):
                return run_id
            time.sleep(0.1)
    raise SystemExit(f"run {run_id} did not end")


if __name__ == "__main__":
    main()
