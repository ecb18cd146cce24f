"""Jira Cloud's enhanced JQL search, as far as the stand-in speaks it: pure parsing, no I/O.

`GET|POST /rest/api/3/search/jql` takes `jql`, `maxResults` (default 50), `fields` (default `id`: an
issue is then only its id, key and self) and `nextPageToken`, and answers `issues`, `nextPageToken`
(absent on the last page, as Jira Cloud answers, JRACLOUD-92184) and `isLast`. It never tells a total;
`POST /rest/api/3/search/approximate-count` does. The token is opaque to the client: here it carries
the last issue number of the page and the query it belongs to, so a token used with another query is
refused as Jira refuses one.

JQL understood: `project = KEY` (the key bare or quoted, in any letter case for the words), with an
optional `ORDER BY key|issuekey|id|created [ASC|DESC]`; every order is by issue number, which is the
order keys, ids and creation share in the stand-in. A query without the project is unbounded, refused
400 with Jira's own words.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DEFAULT_MAX_RESULTS = 50
# Jira returns up to 5,000 issues a page when only ids or keys are asked for, fewer with fields.
MAX_RESULTS_IDS = 5000
MAX_RESULTS_FIELDS = 100
UNBOUNDED = "Unbounded JQL queries are not allowed here. Please add a search restriction to your query."
BAD_TOKEN = "The provided next page token is invalid or expired."
# The fields a stand-in issue has; `*all` and `*navigable` ask for all of them.
FIELDS = ("summary", "description", "status", "issuetype", "project", "labels", "created", "updated")

_CLAUSE = re.compile(
    r"""^\s*project\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[A-Za-z0-9_]+))\s*$""", re.IGNORECASE
)
_ORDER = re.compile(r"^(?P<field>[A-Za-z]+)(?:\s+(?P<dir>ASC|DESC))?$", re.IGNORECASE)
_ORDER_BY = re.compile(r"\bORDER\s+BY\b", re.IGNORECASE)
_PROJECT_KEY = re.compile(r"^[A-Z][A-Z0-9_]+$")
_ORDER_FIELDS = {"key", "issuekey", "id", "created"}


class SearchRefused(ValueError):
    """A search Jira would answer 400; the message is Jira's words."""


@dataclass(frozen=True)
class Jql:
    project: str
    descending: bool = False

    def fingerprint(self) -> str:
        """What a page token is bound to: the query, as understood."""
        return hashlib.sha256(f"{self.project}|{self.descending}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PageToken:
    """Where the next page starts: after the issue numbered `after`, for the query `query`."""

    after: int
    query: str

    def encode(self) -> str:
        raw = json.dumps({"a": self.after, "q": self.query}, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, jql: Jql) -> PageToken:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            data = json.loads(raw)
            after, query = data["a"], data["q"]
        except (binascii.Error, ValueError, TypeError, KeyError) as exc:
            raise SearchRefused(BAD_TOKEN) from exc
        if not isinstance(after, int) or isinstance(after, bool) or after < 0 or query != jql.fingerprint():
            raise SearchRefused(BAD_TOKEN)
        return cls(after, query)


def parse_jql(text: str) -> Jql:
    """The query, or SearchRefused in Jira's words."""
    parts = _ORDER_BY.split(text, maxsplit=1)
    where = parts[0].strip()
    if not where:
        raise SearchRefused(UNBOUNDED)
    clause = _CLAUSE.match(where)
    if clause is None:
        raise SearchRefused(f"Error in the JQL Query: the stand-in understands only `project = KEY`, not {where!r}.")
    project = next(v for v in (clause["dq"], clause["sq"], clause["bare"]) if v is not None).upper()
    if not _PROJECT_KEY.match(project):
        raise SearchRefused(f"The value '{project}' does not exist for the field 'project'.")
    descending = False
    if len(parts) == 2:
        order = _ORDER.match(parts[1].strip())
        if order is None or order["field"].lower() not in _ORDER_FIELDS:
            raise SearchRefused(f"Error in the JQL Query: cannot order by {parts[1].strip()!r}.")
        descending = (order["dir"] or "ASC").upper() == "DESC"
    return Jql(project, descending)


def chosen_fields(asked: Iterable[str]) -> tuple[str, ...]:
    """The fields to return for `fields` as given (names, `*all`, `*navigable`, `-name` to leave one
    out); nothing asked is Jira's default, `id`: no fields at all."""
    names = [name.strip() for item in asked for name in item.split(",") if name.strip()]
    chosen: list[str] = []
    for name in names:
        if name in ("*all", "*navigable"):
            chosen += [f for f in FIELDS if f not in chosen]
        elif name in FIELDS and name not in chosen:
            chosen.append(name)
    excluded = {name[1:] for name in names if name.startswith("-")}
    return tuple(f for f in chosen if f not in excluded)


def page_size(raw: Any, fields: tuple[str, ...]) -> int:
    """`maxResults` as Jira takes it: default 50, at most 5,000 (ids only) or 100 (with fields)."""
    if raw is None or raw == "":
        return DEFAULT_MAX_RESULTS
    try:
        wanted = int(raw)
    except (TypeError, ValueError) as exc:
        raise SearchRefused("maxResults must be an integer.") from exc
    if isinstance(raw, bool) or wanted < 0:
        raise SearchRefused("maxResults must be a positive integer.")
    return max(1, min(wanted, MAX_RESULTS_FIELDS if fields else MAX_RESULTS_IDS))
