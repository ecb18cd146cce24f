"""Jira Cloud ticket events: what an event is, which agents it starts, what each run is asked. Pure.

Jira posts issue webhooks as JSON: `webhookEvent` (`jira:issue_created`, `jira:issue_updated`, ...),
`issue` (`key`, `fields.summary`, ...), `changelog`, with the event's identifier in the header
`X-Atlassian-Webhook-Identifier` (the same on every retry of one event). An agent opts in through its
agents-file entry (`on_ticket_events: [jira:issue_created]`); each agent that opted in for the event is
started once per event identifier, its run asked about the issue by key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ticketiq.agents.catalog import Agent
from ticketiq.errors import RequestError

CHANNEL = "ticket_event"
ACTOR = "jira:webhook"  # the principal ticket events act as (no token name holds ':')
IDENTIFIER_HEADER = "X-Atlassian-Webhook-Identifier"
IDENTIFIER_MAX_CHARS = 255
EVENT_MAX_CHARS = 100
SUMMARY_MAX_CHARS = 500
# Jira issue keys: a project key (a letter, then letters, digits or '_') and a number.
_ISSUE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,49}-[0-9]{1,18}$")


class Malformed(RequestError):
    """A body that is not JSON at all: nothing in it can be named, so 400."""

    status = 400


@dataclass(frozen=True)
class TicketEvent:
    identifier: str
    name: str  # webhookEvent, e.g. jira:issue_created
    issue_key: str
    summary: str


def identifier_problem(identifier: str | None) -> str | None:
    """Why a header value cannot be an event identifier (the dedupe key), or None when it can."""
    if identifier is None or not identifier:
        return f"no {IDENTIFIER_HEADER} header: Jira sends the event's identifier in it"
    if len(identifier) > IDENTIFIER_MAX_CHARS:
        return f"{IDENTIFIER_HEADER} is {len(identifier)} characters long; at most {IDENTIFIER_MAX_CHARS} are taken"
    if not all(" " <= c <= "~" for c in identifier):
        return f"{IDENTIFIER_HEADER} holds characters that are not printable ASCII"
    return None


def parse_event(identifier: str, body: bytes) -> TicketEvent:
    """The event a signed body holds; a RequestError naming what is wrong (400 not JSON, 422 a field)."""
    try:
        data = json.loads(body)
    except ValueError:
        raise Malformed("body", "the body is not JSON; Jira sends its issue webhooks as JSON") from None
    if not isinstance(data, dict):
        raise RequestError("body", "the body must be a JSON object with webhookEvent and issue")
    name = data.get("webhookEvent")
    if not isinstance(name, str) or not 0 < len(name) <= EVENT_MAX_CHARS:
        raise RequestError("body.webhookEvent", "webhookEvent must be the event's name, e.g. jira:issue_created")
    issue = data.get("issue")
    if not isinstance(issue, dict):
        raise RequestError("body.issue", "issue is missing or not an object; only issue events are taken")
    key = issue.get("key")
    if not isinstance(key, str) or not _ISSUE_KEY.fullmatch(key):
        raise RequestError("body.issue.key", "issue.key must be an issue key such as OPS-12")
    fields = issue.get("fields")
    summary = fields.get("summary") if isinstance(fields, dict) else None
    return TicketEvent(identifier, name, key, summary if isinstance(summary, str) else "")


def opted_in(event: str, agents: Mapping[str, Agent]) -> list[str]:
    """The agents that opted in for this event, by name, in a stable order."""
    return sorted(name for name, agent in agents.items() if event in agent.on_ticket_events)


def run_input(event: TicketEvent) -> str:
    """What each run is asked: the issue key named first, so the agent (and its tools) act on it."""
    what = event.name.removeprefix("jira:")
    summary = " ".join(event.summary.split())
    if len(summary) > SUMMARY_MAX_CHARS:
        summary = summary[: SUMMARY_MAX_CHARS - 1] + "…"
    return f"Jira {what} for {event.issue_key}: {summary or '(no summary)'}"


def run_key(identifier: str, agent: str) -> str:
    """One run per (event identifier, agent), however often the event is delivered or retried after a
    crash. Tab-separated: no API Idempotency-Key (printable ASCII) can make it, and the identifier
    holds no tab, so the key is unambiguous whatever the agent's name."""
    return f"{CHANNEL}\t{identifier}\t{agent}"


def body_digest(body: bytes) -> str:
    """The raw body's SHA-256: a signed body replayed under a forged identifier (Jira does not sign the
    identifier header) is found by it."""
    return hashlib.sha256(body).hexdigest()
