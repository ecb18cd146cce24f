"""The tasks vendor's tools, declared to TicketIQ under the entry-point group `ticketiq.tools`.

`tasks_create` is a plain write: the service does not dedupe, so the engine never resends it. The step key
goes where the service can find the task again, its `client_ref`; the reader lists tasks by it, so a create
whose process died before the answer came is settled by reading it back: found (not sent again) or absent
(sent once).

Every request goes through `ticketiq.tools.http.request`: the engine's lease check at the last moment
before the bytes leave, the write's window, timeouts, retries of what cannot repeat a write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.http import Send, request

VENDOR = "tasks"
# Read by this package, not by TicketIQ's settings module: a package brings its own configuration.
URL_VARIABLE = "TICKETIQ_TASKS_URL"

_TASK_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$", "description": "The task's id, e.g. T-12"}
_TITLE = {"type": "string", "minLength": 1, "maxLength": 200}
_NOTES = {"type": "string", "maxLength": 4000}


def tools(settings: Settings) -> list[Tool]:
    """The entry point: the package's tools for a process with these settings."""
    service = TasksService(os.environ.get(URL_VARIABLE, "").rstrip("/"))
    return [
        Tool(
            "tasks_get",
            "Read a task: its title, notes and status.",
            _params({"task_id": _TASK_ID}),
            ToolClass.READ,
            service.get,
            vendor=VENDOR,
        ),
        Tool(
            "tasks_create",
            "Create a task with a title and, optionally, notes.",
            _params({"title": _TITLE, "notes": _NOTES}, required=["title"]),
            ToolClass.WRITE,
            service.create,
            reader=service.find_created,
            vendor=VENDOR,
        ),
    ]


@dataclass(frozen=True)
class TasksService:
    base: str  # "" when TICKETIQ_TASKS_URL is not set: the tools exist, and each call says what is missing

    async def get(self, ctx: CallContext) -> Outcome:
        if not self.base:
            return _unset()
        url = f"{self.base}/tasks/{quote(ctx.args['task_id'], safe='')}"
        reply = await request(ctx, VENDOR, "GET", url, send=Send.READ)
        return Outcome(ok=True, result=reply.body)

    async def create(self, ctx: CallContext) -> Outcome:
        if not self.base:
            return _unset()
        body = {"title": ctx.args["title"], "notes": ctx.args.get("notes", ""), "client_ref": ctx.key}
        # Send.UNKEYED: the service would make a second task, so a try that may have reached it is never resent.
        reply = await request(ctx, VENDOR, "POST", f"{self.base}/tasks", send=Send.UNKEYED, json=body)
        return Outcome(ok=True, result=_created(reply.body))

    async def find_created(self, ctx: CallContext) -> ReadBack:
        """The reader: the task created with this call's key, if the service has one."""
        if not self.base:
            return ReadBack(found=None)  # cannot ask: never "did not land"
        listed = await request(ctx, VENDOR, "GET", f"{self.base}/tasks", send=Send.READ, params={"client_ref": ctx.key})
        tasks = listed.body["tasks"]
        if not tasks:
            return ReadBack(found=False)
        return ReadBack(found=True, outcome=Outcome(ok=True, result=_created(tasks[0])))


def _created(task: dict[str, Any]) -> dict[str, Any]:
    """What the model is told of a created task, the same whether the answer came or it was read back."""
    return {"task_id": task["id"], "title": task["title"]}


def _unset() -> Outcome:
    return Outcome(ok=False, error=f"{VENDOR}: {URL_VARIABLE} is not set; point it at the tasks service")


def _params(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required if required is not None else list(properties),
        "additionalProperties": False,
    }
