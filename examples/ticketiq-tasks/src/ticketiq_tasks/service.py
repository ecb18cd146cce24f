"""The tasks vendor: a small HTTP service keeping tasks in memory.

- `POST /tasks` `{"title", "notes"?, "client_ref"?}` creates a task (201). It does not dedupe on
  `client_ref`: a create sent twice makes two tasks, as most vendors' creates do, which is why the tool
  sends the step key there and reads it back rather than resending.
- `GET /tasks/{id}` reads one task (404 when there is none).
- `GET /tasks?client_ref=...` lists the tasks created with that external reference: how a write whose
  answer was lost is found again.

For tests of a process dying mid-write, two routes of the service's own:
- `GET /_service/creates`: every create it received, in order, with whether it stored the task and
  whether it is holding the request now.
- `POST /_service/hold` `{"when": "after_store" | "before_store", "seconds": n}`: the next create is held
  for `seconds`, or until its client is gone, after storing its task (the answer is late) or before
  storing it (then it is dropped unstored and answered 503).
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

_LIMITS = {"title": 200, "notes": 4000, "client_ref": 200}


@dataclass
class Create:
    """One create as the service received it."""

    number: int
    title: str
    client_ref: str | None
    stored: bool = False
    held: bool = False
    task_id: str | None = None


@dataclass(frozen=True)
class Hold:
    when: str  # after_store / before_store
    seconds: float


@dataclass
class Tasks:
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    creates: list[Create] = field(default_factory=list)
    next_hold: Hold | None = None

    def store(self, title: str, notes: str, client_ref: str | None) -> dict[str, Any]:
        task_id = f"T-{len(self.tasks) + 1}"
        task = {"id": task_id, "title": title, "notes": notes, "client_ref": client_ref, "status": "open"}
        self.tasks[task_id] = task
        return task


def problem(body: Any) -> str | None:
    """What is wrong with a create's body, naming the field; None when nothing is."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    unknown = sorted(set(body) - set(_LIMITS))
    if unknown:
        return f"field {unknown[0]!r} is not known; the fields are {', '.join(_LIMITS)}"
    if not isinstance(body.get("title"), str) or not body["title"].strip():
        return "field 'title' is required: a non-empty string"
    for name, limit in _LIMITS.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > limit):
            return f"field {name!r} must be a string of at most {limit} characters"
    return None


def app(tasks: Tasks | None = None) -> Starlette:
    tasks = tasks if tasks is not None else Tasks()

    async def create(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        wrong = problem(body)
        if wrong is not None:
            return _error(400, wrong)
        received = Create(len(tasks.creates) + 1, body["title"], body.get("client_ref"))
        tasks.creates.append(received)
        hold, tasks.next_hold = tasks.next_hold, None
        if hold is not None and hold.when == "before_store":
            await _held(request, received, hold)
            return _error(503, "the create was dropped before it was stored")
        task = tasks.store(body["title"], body.get("notes") or "", body.get("client_ref"))
        received.stored, received.task_id = True, task["id"]
        if hold is not None:
            await _held(request, received, hold)
        return JSONResponse(task, status_code=201)

    async def listed(request: Request) -> JSONResponse:
        ref = request.query_params.get("client_ref")
        found = [t for t in tasks.tasks.values() if ref is None or t["client_ref"] == ref]
        return JSONResponse({"tasks": found})

    async def read(request: Request) -> JSONResponse:
        task = tasks.tasks.get(request.path_params["task_id"])
        if task is None:
            return _error(404, f"no task {request.path_params['task_id']}")
        return JSONResponse(task)

    async def creates(request: Request) -> JSONResponse:
        return JSONResponse([asdict(c) for c in tasks.creates])

    async def hold(request: Request) -> JSONResponse:
        body = await request.json()
        if not isinstance(body, dict) or body.get("when") not in ("after_store", "before_store"):
            return _error(400, "field 'when' must be 'after_store' or 'before_store'")
        seconds = body.get("seconds", 30.0)
        if not isinstance(seconds, int | float) or seconds < 0:
            return _error(400, "field 'seconds' must be a number of seconds, at least 0")
        tasks.next_hold = Hold(body["when"], float(seconds))
        return JSONResponse({"when": body["when"], "seconds": float(seconds)})

    return Starlette(
        routes=[
            Route("/tasks", create, methods=["POST"]),
            Route("/tasks", listed, methods=["GET"]),
            Route("/tasks/{task_id}", read, methods=["GET"]),
            Route("/_service/creates", creates, methods=["GET"]),
            Route("/_service/hold", hold, methods=["POST"]),
        ]
    )


async def _held(request: Request, received: Create, hold: Hold) -> None:
    """Hold the request for `hold.seconds`, or until its client is gone (a killed process closes its socket)."""
    received.held = True
    try:
        ends = asyncio.get_running_loop().time() + hold.seconds
        while asyncio.get_running_loop().time() < ends and not await request.is_disconnected():
            await asyncio.sleep(0.05)
    finally:
        received.held = False


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ticketiq_tasks.service", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8300)
    args = parser.parse_args(argv)
    # A held request is not waited for at shutdown beyond a second.
    uvicorn.run(app(), host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=1)


if __name__ == "__main__":
    main()
