"""The run list (`GET /v1/runs`): what a query asks, its cursor, and how a run and what it waits for
are shown. Pure: the store reads the page, these decide what was asked and what is answered.

A page is newest first, by (created_at, id), and the next one starts strictly after the last run shown
(keyset pagination): runs created meanwhile land before the first page, never inside a later one, so
paging through shows each run at most once and every run that existed when paging began.

The cursor is opaque to clients: a version, then the last run's creation time and id, in url-safe
base64. It carries no right (the store applies the caller's scope to every page), so a forged cursor
can only move where a page starts; a malformed one is refused as `query.cursor`, never a 500.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ticketiq.errors import RequestError
from ticketiq.storage.rows import Waiting

STATUSES = ("queued", "running", "waiting", "answered", "succeeded", "failed", "interrupted", "stopped")
FILTERS = ("status", "agent", "channel", "created_by", "since", "until", "q", "held", "limit", "cursor")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_NAME = 200  # agent, channel and token names are shorter than this
MAX_TEXT = 200  # a search, in characters
MAX_CURSOR = 200
_CURSOR_VERSION = "1"
_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class RunQuery:
    statuses: tuple[str, ...] = ()
    agent: str | None = None
    channel: str | None = None
    created_by: str | None = None
    since: datetime | None = None  # created at or after
    until: datetime | None = None  # created before
    q: str | None = None  # words of the input or the answer
    held: bool | None = None  # held against the retention policy (issue 34), or not; None: either
    limit: int = DEFAULT_LIMIT
    cursor: str | None = None


@dataclass(frozen=True)
class RunPage:
    runs: list[dict[str, Any]] = field(default_factory=list)
    next_cursor: str | None = None


@dataclass(frozen=True)
class Position:
    """Where a page starts: strictly after (older than) this run."""

    created_at: datetime
    run_id: str


# ----- the query ---------------------------------------------------------------------------------------


def parse_query(params: Mapping[str, str | Sequence[str]]) -> RunQuery:
    """A query from the request's parameters (each a value or the list of its values). Every refusal
    names its parameter, `query.<name>`."""
    values = {name: [given] if isinstance(given, str) else list(given) for name, given in params.items()}
    for name in values:
        if name not in FILTERS:
            raise RequestError(f"query.{name}", f"unknown parameter {name!r}; the list takes {', '.join(FILTERS)}")
    statuses = _statuses(values.get("status", []))
    since = _time("since", _once(values, "since"))
    until = _time("until", _once(values, "until"))
    if since is not None and until is not None and until <= since:
        raise RequestError("query.until", "until must be later than since")
    cursor = _once(values, "cursor")
    if cursor is not None:
        decode_cursor(cursor)  # refused here, before anything is read
    return RunQuery(
        statuses=statuses,
        agent=_name("agent", _once(values, "agent")),
        channel=_name("channel", _once(values, "channel")),
        created_by=_name("created_by", _once(values, "created_by")),
        since=since,
        until=until,
        q=_search(_once(values, "q")),
        held=_held(_once(values, "held")),
        limit=_limit(_once(values, "limit")),
        cursor=cursor,
    )


def _held(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in ("true", "false"):
        raise RequestError("query.held", "held must be true or false")
    return value == "true"


def _once(values: Mapping[str, list[str]], name: str) -> str | None:
    given = values.get(name, [])
    if len(given) > 1:
        raise RequestError(f"query.{name}", f"give {name} once (it was given {len(given)} times)")
    return given[0] if given else None


def _statuses(given: Iterable[str]) -> tuple[str, ...]:
    """`status` may repeat (status=waiting&status=running), and a value may list several (waiting,running)."""
    chosen = {s.strip() for value in given for s in value.split(",") if s.strip()}
    unknown = sorted(chosen - set(STATUSES))
    if unknown:
        raise RequestError("query.status", f"no status {', '.join(map(repr, unknown))}; a run is {', '.join(STATUSES)}")
    return tuple(s for s in STATUSES if s in chosen)


def _name(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if not value or len(value) > MAX_NAME:
        raise RequestError(f"query.{name}", f"{name} must be 1 to {MAX_NAME} characters")
    return value


def _time(name: str, value: str | None) -> datetime | None:
    """ISO 8601, a date or a date and time; without an offset, UTC. A `+` of an offset sent unencoded in
    the URL arrives as a space, and is read as the `+` it was."""
    if value is None:
        return None
    text = value.strip()
    if "T" in text and text.count(" ") == 1:
        text = text.replace(" ", "+")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise RequestError(f"query.{name}", f"{name} {value!r} is not an ISO 8601 time "
                           "(e.g. 2025-05-01 or 2025-05-01T08:00:00Z)") from None  # fmt: skip
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _search(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if len(text) > MAX_TEXT:
        raise RequestError("query.q", f"q must be at most {MAX_TEXT} characters")
    if not _WORD.search(text):
        raise RequestError("query.q", "q has no word to search for (letters or digits)")
    return text


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_LIMIT
    try:
        limit = int(value.strip())
    except ValueError:
        raise RequestError("query.limit", f"limit {value!r} is not a whole number") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise RequestError("query.limit", f"limit must be 1 to {MAX_LIMIT}")
    return limit


# ----- the cursor ----------------------------------------------------------------------------------------


def encode_cursor(position: Position) -> str:
    text = f"{_CURSOR_VERSION}|{position.created_at.isoformat()}|{position.run_id}"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names; RequestError `query.cursor` for anything `encode_cursor` did not make."""
    refused = RequestError("query.cursor", "cursor is not one this list gave; use the next_cursor of a page, "
                           "or leave it out for the newest runs")  # fmt: skip
    if not cursor or len(cursor) > MAX_CURSOR:
        raise refused
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, at, run_id = raw.decode("ascii").split("|")
        created_at = datetime.fromisoformat(at)
        parsed = uuid.UUID(run_id)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise refused from None
    if version != _CURSOR_VERSION or created_at.tzinfo is None or str(parsed) != run_id:
        raise refused
    position = Position(created_at, run_id)
    if encode_cursor(position) != cursor:
        raise refused  # the same position written otherwise (padding, stray characters): not one we gave
    return position


# ----- the statement's parameters and the page -------------------------------------------------------------


def params(query: RunQuery, scope: str | None) -> dict[str, Any]:
    """The list statement's parameters: one more run than the page, to know whether another follows.
    `scope`: the token whose runs alone are read (None: every run)."""
    after = decode_cursor(query.cursor) if query.cursor is not None else None
    return {
        "scope": scope,
        # One status is an equality (its index gives the page in order); several, comma separated (no
        # status holds a comma): a list would travel as jsonb, which the planner cannot read as values.
        "status": query.statuses[0] if len(query.statuses) == 1 else None,
        "statuses": ",".join(query.statuses) if len(query.statuses) > 1 else None,
        "agent": query.agent,
        "channel": query.channel,
        "created_by": query.created_by,
        "since": query.since,
        "until": query.until,
        "q": query.q,
        "held": query.held,
        "after_at": after.created_at if after else None,
        "after_id": after.run_id if after else None,
        "limit": query.limit + 1,
    }


def page(rows: Sequence[Mapping[str, Any]], query: RunQuery) -> RunPage:
    """The page of at most `query.limit` runs, and the cursor of the next when there is one."""
    shown = [summary(row) for row in rows[: query.limit]]
    more = len(rows) > query.limit and shown
    last = rows[query.limit - 1] if more else None
    cursor = encode_cursor(Position(last["created_at"], str(last["id"]))) if last is not None else None
    return RunPage(shown, cursor)


def summary(row: Mapping[str, Any]) -> dict[str, Any]:
    """A run as the list shows it; `waiting_for` is the oldest thing a waiting run waits for."""
    wait = None
    if row["status"] == "waiting" and row.get("wait_kind") is not None:
        wait = Waiting(
            kind=row["wait_kind"],
            question=row["wait_question"],
            approval_id=_text(row.get("wait_approval_id")),
            question_id=_text(row.get("wait_question_id")),
            tool=row.get("wait_tool"),
        )
    return {
        "id": str(row["id"]),
        "agent": row["agent"],
        "status": row["status"],
        "channel": row["channel"],
        "created_by": row["created_by"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "attempt": row["attempt"],
        "losses": row["losses"],
        "steps": row["steps"],
        "held": row.get("held_at") is not None,
        "waiting_for": shown(wait) if wait is not None else None,
    }


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# ----- what a waiting run waits for -----------------------------------------------------------------------

_KIND_ORDER = {"input": 0, "approval": 1}
_NEVER = datetime.min.replace(tzinfo=UTC)


def oldest_first(waits: Iterable[Waiting]) -> list[Waiting]:
    """By when each was asked, then the step and call that asked (the list's statement orders the same)."""
    return sorted(waits, key=lambda w: (w.asked_at or _NEVER, w.step, w.idx, _KIND_ORDER.get(w.kind, 2)))


def shown(wait: Waiting) -> dict[str, Any]:
    if wait.kind == "input":
        return {"kind": "input", "question": wait.question, "question_id": _text(wait.question_id)}
    return {"kind": wait.kind, "approval_id": _text(wait.approval_id), "tool": wait.tool, "question": wait.question}
