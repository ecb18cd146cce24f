"""A Jira project read page by page, as pure decisions: the query, a page's shape, the rows it makes,
and the sync's cursor (what the job's state holds). No I/O here; `source_sync.py` drives it.

Jira Cloud's enhanced search (`POST /rest/api/3/search/jql`) pages by an opaque `nextPageToken`,
omits it on the last page (JRACLOUD-92184; `isLast` may say so too) and never tells a total:
`POST /rest/api/3/search/approximate-count` estimates one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ticketiq.values.storable import storable

SOURCE = "jira"
FIELDS = ("summary", "description", "labels", "status", "updated")
PROJECT_KEY = re.compile(r"^[A-Z][A-Z0-9_]{1,9}$")  # Jira's default rule for a project key
_JIRA_TIME = "%Y-%m-%dT%H:%M:%S.%f%z"


class PageMalformed(ValueError):
    """Jira answered a search in a shape that is not its protocol's: nothing of it is written."""


def jql_for(project: str) -> str:
    """Every issue of the project, in key order: the order pages are written and resumed in."""
    return f'project = "{project}" ORDER BY key ASC'


@dataclass(frozen=True)
class SearchPage:
    issues: tuple[Mapping[str, Any], ...]
    next_page_token: str | None

    @property
    def last(self) -> bool:
        return self.next_page_token is None

    @classmethod
    def parse(cls, body: Any) -> SearchPage:
        """A page of the enhanced search. The last page is the one without a token, whatever `isLast`
        says: without a token there is no next page to ask for."""
        if not isinstance(body, dict) or not isinstance(body.get("issues"), list):
            raise PageMalformed("the search answer holds no `issues` list")
        for issue in body["issues"]:
            if not isinstance(issue, dict) or not isinstance(issue.get("key"), str) or not issue["key"]:
                raise PageMalformed("an issue of the page has no key")
            if not isinstance(issue.get("fields", {}), dict):
                raise PageMalformed(f"issue {issue['key']}: `fields` is not an object")
        token = body.get("nextPageToken")
        if token is not None and (not isinstance(token, str) or not token):
            raise PageMalformed("`nextPageToken` is not a string")
        if body.get("isLast") is True:
            token = None
        return cls(tuple(body["issues"]), token)


def knowledge_rows(page: SearchPage) -> list[dict[str, Any]]:
    """The page's issues as knowledge rows, storable (I16: a pasted log may hold a NUL), each key once
    (the last of a key wins: one statement cannot upsert a row twice)."""
    rows: dict[str, dict[str, Any]] = {}
    for issue in page.issues:
        fields = issue.get("fields") or {}
        status = fields.get("status")
        row = {
            "key": issue["key"],
            "title": _text(fields.get("summary")),
            "body": adf_text(fields.get("description")),
            "labels": [label for label in fields.get("labels") or [] if isinstance(label, str)],
            "status": status.get("name") if isinstance(status, dict) else None,
            "updated_at": _moment(fields.get("updated")),
        }
        rows[issue["key"]] = storable(row)[0]
    return list(rows.values())


def adf_text(doc: Any) -> str:
    """The plain text of an Atlassian Document Format document: its text nodes, a line per block."""
    if doc is None:
        return ""
    if isinstance(doc, str):  # API v2 and some fields give plain text
        return doc
    lines: list[str] = []

    def walk(node: Any, line: list[str]) -> None:
        if not isinstance(node, dict):
            return
        if node.get("type") == "text" and isinstance(node.get("text"), str):
            line.append(node["text"])
        elif node.get("type") == "hardBreak":
            line.append("\n")
        for child in node.get("content") or []:
            if isinstance(child, dict) and child.get("type") in _BLOCKS:
                block: list[str] = []
                walk(child, block)
                if block:
                    lines.append("".join(block))
            else:
                walk(child, line)

    top: list[str] = []
    walk(doc, top)
    if top:
        lines.insert(0, "".join(top))
    return "\n".join(lines)


_BLOCKS = frozenset({"paragraph", "heading", "blockquote", "codeBlock", "listItem", "panel", "rule", "tableCell"})


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _moment(value: Any) -> str | None:
    """Jira's `2024-01-01T09:17:00.000+0000` as ISO 8601; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, _JIRA_TIME).isoformat()
    except ValueError:
        return None


@dataclass(frozen=True)
class SyncCursor:
    """Where a sync stands: the job's state, written with each page in one statement.

    `next_page_token` None with no page written yet means the first page; `finished` means the last
    page is written and nothing is left to ask for."""

    next_page_token: str | None = None
    pages: int = 0
    issues: int = 0
    total: int | None = None  # Jira's estimate, asked once before the first page
    finished: bool = False

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> SyncCursor:
        if not state:
            return cls()
        total = state.get("total")
        return cls(
            next_page_token=state.get("next_page_token"),
            pages=int(state.get("pages", 0)),
            issues=int(state.get("issues", 0)),
            total=int(total) if total is not None else None,
            finished=bool(state.get("finished", False)),
        )

    def state(self) -> dict[str, Any]:
        return {
            "next_page_token": self.next_page_token,
            "pages": self.pages,
            "issues": self.issues,
            "total": self.total,
            "finished": self.finished,
        }

    @property
    def started(self) -> bool:
        return self.pages > 0

    def after(self, page: SearchPage, written: int) -> SyncCursor:
        """The cursor once `page` (of `written` distinct issues) is written. A token that would ask for
        the page just read again cannot make progress: PageMalformed."""
        if page.next_page_token is not None and page.next_page_token == self.next_page_token:
            raise PageMalformed("the next page's token is the token of the page just read")
        return replace(
            self,
            next_page_token=page.next_page_token,
            pages=self.pages + 1,
            issues=self.issues + written,
            finished=page.last,
        )

    def progress(self) -> tuple[int, int | None]:
        """Done of total: the estimate while it holds, the exact count once finished; never below done."""
        if self.finished:
            return self.issues, self.issues
        if self.total is None:
            return self.issues, None
        return self.issues, max(self.total, self.issues)
