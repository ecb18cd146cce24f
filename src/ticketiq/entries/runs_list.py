"""The run list and the processes, over HTTP (issue 16):

- `GET /v1/runs?status=&agent=&channel=&created_by=&since=&until=&q=&held=&limit=&cursor=` (caller: its own
  runs; operator and admin: every run): newest first, `{"runs": [...], "next_cursor": ...}`. The query
  is parsed by `views/run_list.parse_query`: a bad or unknown parameter is 422 naming `query.<name>`.
- `GET /v1/processes` (operator): the live app processes, what each holds, and the last that ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.entries import answers
from ticketiq.entries.auth import requires
from ticketiq.views import run_list
from ticketiq.views.runs import RunViews

Reader = Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))]
Operator = Annotated[Principal, Depends(requires(Permission.READ_EVERY_RUN))]


def _documented(name: str, description: str, many: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": {"type": "string"}} if many else {"type": "string"}
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema}


# Parsed by run_list.parse_query from the raw query (so a repeated or unknown parameter is refused by
# name); listed here for the OpenAPI.
LIST_PARAMETERS = [
    _documented("status", f"repeatable: {', '.join(run_list.STATUSES)}", many=True),
    _documented("agent", "the agent's name"),
    _documented("channel", "the entry point: api, a2a, cron, teams, webhook, ticket_event, copilot, delegation"),
    _documented("created_by", "the name of the token that started the run"),
    _documented("since", "created at or after this ISO 8601 time (no offset: UTC)"),
    _documented("until", "created before this ISO 8601 time"),
    _documented("q", 'words of the input or the answer, all of them ("quoted phrase", or, -word)'),
    _documented("held", "true: only the runs held against the retention policy; false: only those not held"),
    _documented("limit", f"runs in a page, 1 to {run_list.MAX_LIMIT} (default {run_list.DEFAULT_LIMIT})"),
    _documented("cursor", "the previous page's next_cursor"),
]


def add_routes(router: APIRouter, views: Callable[[Request], RunViews]) -> None:
    @router.get(
        "/v1/runs", openapi_extra={"parameters": LIST_PARAMETERS}, responses=answers.documented(200, answers.RunPage)
    )
    async def list_runs(request: Request, reader: Reader) -> dict[str, Any]:
        params = request.query_params
        query = run_list.parse_query({name: params.getlist(name) for name in params})
        page = await views(request).list_runs(query, tokens.run_scope(reader))
        return {"runs": page.runs, "next_cursor": page.next_cursor}

    @router.get("/v1/processes")
    async def processes(request: Request, _: Operator) -> dict[str, Any]:
        return await views(request).processes()
