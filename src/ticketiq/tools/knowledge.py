"""`knowledge_search`: an agent reads what source syncs pulled in (the `knowledge` table) by Postgres
full-text search.

A read: it changes nothing, is never marked in doubt and is simply made again on resume (I9). Its
query is websearch syntax (`websearch_to_tsquery`: words, "a phrase", -word, or), matched against
each issue's title and body (title ranked higher); the answer is the best matches, ranked, each with
its key, title, labels and a snippet of the body around the match.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ticketiq.errors import StorageError
from ticketiq.storage.knowledge_store import KnowledgeStore
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass

if TYPE_CHECKING:
    from ticketiq.storage.database import Database

log = logging.getLogger(__name__)

SOURCE = "jira"
DEFAULT_LIMIT = 5
MAX_LIMIT = 25

PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": 'What to look for: words, "a phrase", -word to leave out, or.',
        },
        "project": {
            "type": "string",
            "pattern": "^[A-Z][A-Z0-9_]+$",
            "maxLength": 255,
            "description": "Only issues of this Jira project, e.g. OPS.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "How many matches at most."},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def tools(db: Database) -> list[Tool]:
    store = KnowledgeStore(db)

    async def search(ctx: CallContext) -> Outcome:
        try:
            rows = await store.search(
                SOURCE, ctx.args["query"], ctx.args.get("project"), int(ctx.args.get("limit", DEFAULT_LIMIT))
            )
        except StorageError as exc:
            log.warning("run %s: knowledge_search could not read the knowledge table: %s", ctx.run_id, exc)
            why = exc.sqlstate or "no answer"
            return Outcome(ok=False, error=f"the knowledge base could not be searched now ({why})")
        return Outcome(ok=True, result={"matches": [match(row) for row in rows]})

    return [
        Tool(
            "knowledge_search",
            "Search the issues synced from Jira (titles and descriptions) by full-text search; answers the best "
            "matches, ranked, with key, title, labels and a snippet.",
            PARAMETERS,
            ToolClass.READ,
            search,
        )
    ]


def match(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": row["key"],
        "project": row["project"],
        "title": row["title"],
        "snippet": row["snippet"],
        "labels": list(row["labels"]),
        "status": row["status"],
        "rank": round(float(row["rank"]), 4),
    }
