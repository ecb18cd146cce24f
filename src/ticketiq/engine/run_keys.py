"""Every run's idempotency key, made from its maker's namespace and parts (I19).

`runs.idempotency_key` is one unique column for every maker, so a key one maker can make must be a key
no other can: a caller who could send a cron fire's key as its Idempotency-Key would make the fire's run
itself (and the schedule's agent would never run). Each key is its namespace, then its parts, joined
by tabs. An Idempotency-Key is printable ASCII (no tab) and a token's name holds no tab, so the API's
keys are the one namespace an API caller can reach, and within it only its own token's keys.

| namespace | made by | key |
| --- | --- | --- |
| `api` | `POST /v1/runs` | `api<TAB><token><TAB><Idempotency-Key>` |
| `copilot` | `POST /v1/copilot/turns` | `copilot<TAB><token><TAB><Idempotency-Key>` |
| `a2a` | an A2A `message/send` starting a task | `a2a<TAB><token><TAB><messageId>` |
| `cron` | a schedule's fire | `cron<TAB><schedule id><TAB><fire time, UTC ISO 8601>` |
| `workflow` | a workflow run's agent step | `workflow<TAB><the step's key (I11)>` |
| `webhook` | a webhook delivery (`webhook_triggers.run_key`) | `webhook<TAB><trigger><TAB><delivery id>` |
| `ticket_event` | a Jira event, per agent (`ticket_events.run_key`) | `ticket_event<TAB><identifier><TAB><agent>` |
| `teams` | a Teams activity (`teams_inbox.run_key`) | `teams§<digest of conversation and activity id>` |

Only the last part may hold a tab (a messageId, a delivery id's text): the parts before it cannot, so a
key names its parts one way only. The last three keep the formats they had before this module; each
was unmakeable through the API already. Migration 020 moved the keys of runs made before it (an API
run's raw key, `cron:`, `copilot:`, `a2a:`, a workflow step's bare key) into these namespaces.

A maker that finds a run under its key checks that the run is one it makes (`foreign`) before it takes
the run as its own: a key is no way to reach a run someone else made.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from ticketiq.storage.rows import Created

SEPARATOR = "\t"
# teams_inbox.RUN_KEY_PREFIX: a `§`, not a tab, as it was before the namespaces were written down.
_TEAMS_PREFIX = "teams§"


class Namespace(StrEnum):
    API = "api"
    COPILOT = "copilot"
    A2A = "a2a"
    CRON = "cron"
    WORKFLOW = "workflow"
    WEBHOOK = "webhook"
    TICKET_EVENT = "ticket_event"
    TEAMS = "teams"


def _key(namespace: Namespace, *parts: str) -> str:
    for part in parts[:-1]:
        if SEPARATOR in part:
            raise ValueError(f"a {namespace.value} run key's part {part!r} holds a tab: the key would be ambiguous")
    return SEPARATOR.join((namespace.value, *parts))


def api(token: str, key: str) -> str:
    """A run made through `POST /v1/runs` with an Idempotency-Key: the token's own."""
    return _key(Namespace.API, token, key)


def copilot(token: str, key: str) -> str:
    """A co-pilot turn made with an Idempotency-Key."""
    return _key(Namespace.COPILOT, token, key)


def a2a(principal: str, message_id: str) -> str:
    """The run of an A2A message that starts a task: the same message again finds it."""
    return _key(Namespace.A2A, principal, message_id)


def cron(schedule_id: str, fire_at: datetime) -> str:
    """A schedule's fire: two leaders making the same fire make one run."""
    return _key(Namespace.CRON, schedule_id, fire_at.astimezone(UTC).isoformat())


def workflow_step(step_key: str) -> str:
    """A workflow agent step's run: the step executed again (a crash) finds the run it made."""
    return _key(Namespace.WORKFLOW, step_key)


def namespace(run_key: str) -> Namespace | None:
    """The namespace a run key is in; None for a key no maker makes (one made before migration 020)."""
    if run_key.startswith(_TEAMS_PREFIX):
        return Namespace.TEAMS
    head, tab, _ = run_key.partition(SEPARATOR)
    if not tab or head == Namespace.TEAMS.value:
        return None
    try:
        return Namespace(head)
    except ValueError:
        return None


@dataclass(frozen=True)
class Expected:
    """What a run its maker made looks like; a field left None is not looked at."""

    channel: str
    made_by: str | None = None  # the creator its `agent.run.created` audit row names
    created_by: str | None = None  # the token that may read it
    agent: str | None = None


def foreign(found: Created, expected: Expected) -> str | None:
    """Why a run found under a maker's key is not that maker's run; None when it is (I19)."""
    differences = [
        f"{name} {theirs!r}, not {ours!r}"
        for name, theirs, ours in (
            ("channel", found.channel, expected.channel),
            ("made by", found.made_by, expected.made_by),
            ("created by", found.created_by, expected.created_by),
            ("agent", found.agent, expected.agent),
        )
        if ours is not None and theirs != ours
    ]
    if not differences:
        return None
    return f"run {found.id} holds this key but was not made here: its {', '.join(differences)}"
