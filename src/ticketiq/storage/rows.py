"""Typed rows the stores return: what the engine and the entry points read, never driver dicts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


# Each row class's field names, read once: `fields()` and reading its Field objects cost every row of a
# list again (a Checkpoint row: 8.1-9.3 µs, 6.3-6.5 with the names kept; timeit).
_NAMES: dict[type, tuple[str, ...]] = {}


def row_as(cls: type[T], row: dict[str, Any], **given: Any) -> T:
    """Build a row dataclass from a driver row, keeping the columns it names (uuids become text);
    `given` fields are set as given (a value built from the row, not a column of it)."""
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    values = {}
    for name in names:
        if name in row:
            value = row[name]
            values[name] = str(value) if isinstance(value, uuid.UUID) else value
    values.update(given)
    return cls(**values)


@dataclass(frozen=True)
class Checkpoint:
    """A run's checkpoint as a take (acquire or claim) found it, under the attempt it now holds."""

    run_id: str
    attempt: int
    step: int
    losses: int
    state: str
    seal: str
    key_id: str
    sealed_attempt: int
    sealed_losses: int
    seal_format: int = 2
    state_format: int = 1  # a take returns both (migration 031); 1 and 2 are what a row before it holds
    prev_seal: str | None = None
    # The lease's expiry before this attempt took it: the last holder sent nothing after it (I14).
    lease_expired_at: datetime | None = None
    why: str = "acquired"  # acquired, lapsed, dead
    run_status: str | None = None  # the run's status as the take left it, where the take tells (acquire)
    facts: GateFacts | None = None  # the gates' facts, read in the take itself where it reads them


@dataclass(frozen=True)
class Created:
    id: str
    status: str
    created: bool  # False: an earlier request with the same key made it
    request_hash: str | None = None
    created_by: str | None = None  # the token that started it
    channel: str | None = None
    agent: str | None = None
    made_by: str | None = None  # the actor its `agent.run.created` audit row names (run_keys.foreign)
    born_status: str | None = None  # found by its key: the status it was made with (what its maker answered)


@dataclass(frozen=True)
class RunStatus:
    status: str
    answer: str | None
    error: str | None


@dataclass(frozen=True)
class RunRecord:
    id: str
    agent: str
    input: str
    owner: str
    tenant: str
    channel: str
    may_wait: bool
    status: str
    answer: str | None
    error: str | None
    parent_run_id: str | None
    stop_requested_at: datetime | None
    stopped_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    step: int
    losses: int
    checkpoint_at: datetime
    created_by: str | None = None  # the API token that started it (a child: its parent's)
    updated_at: datetime | None = None  # its row's last change or its last checkpoint, the later
    state_format: int = 1  # its checkpoint's formats (engine/resume.py): a newer one waits for its release
    seal_format: int = 2
    held_at: datetime | None = None  # held against every retention pass (issue 34), by whom and why
    held_by: str | None = None
    hold_reason: str | None = None
    restored_at: datetime | None = None  # found unfinished by a restore (I24), from which backup
    restored_from: str | None = None


@dataclass(frozen=True)
class CallRecord:
    """One call's row: what was marked (I2) and recorded, as a resume reads it."""

    step: int
    idx: int
    attempt: int
    provider_call_id: str
    tool: str
    tool_class: str
    step_key: str | None
    sent_key: str | None
    args: dict[str, Any]
    status: str  # pending / in_doubt / done / settled
    outcome: Any
    settlement: str | None
    in_flight_s: float = 0.0  # I14: how long it may still be in flight, by the database clock
    remote_ref: str | None = None  # a remote agent's task id, recorded the moment it was known (I9)


@dataclass(frozen=True)
class Approval:
    id: str
    run_id: str
    step: int
    idx: int
    tool: str
    args: dict[str, Any]
    step_key: str | None
    binding: str
    status: str  # pending / approved / rejected / withdrawn (its run ended first; `reason` says how)
    decided_by: str | None
    reason: str | None
    created_at: datetime
    decided_at: datetime | None
    # Why a person is asked when not the approval gate (I24: a restored run's write); None: the approval gate.
    asked_why: str | None = None

    def shown(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class AskedApproval:
    """A request with who asked for it: its run's agent, on behalf of the token that started the run."""

    approval: Approval
    agent: str
    asked_by: str | None  # None: a run started before tokens existed (migration 004)


@dataclass(frozen=True)
class GateFacts:
    """What the gates know about one run, read in one query at the step."""

    agent: str
    tenant: str
    owner: str
    channel: str
    may_wait: bool
    agent_quarantine: str | None = None  # reason, when quarantined
    tenant_quarantine: str | None = None
    stopped_by: str | None = None
    channel_enabled: bool = True
    owner_may_run: bool = True
    granted: frozenset[str] = field(default_factory=frozenset)
    needs_approval: frozenset[str] = field(default_factory=frozenset)
    # Who started the run, when an API token did (runs.created_by; a child's is its parent's), and what that
    # token may do as it stands now (migration 032): a delegation starts only what the starter could.
    starter: str | None = None
    starter_role: str | None = None  # None: no such token (any more)
    starter_agents: frozenset[str] | None = None  # None: every agent
    starter_revoked: bool = False
    # I24: when `ticketiq db restore` found the run unfinished in its backup (migration 037), and which backup;
    # None: never.
    restored_at: datetime | None = None
    restored_from: str | None = None


@dataclass(frozen=True)
class TranscriptRow:
    id: int
    at: datetime
    kind: str
    body: dict[str, Any]


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: datetime
    action: str
    run_id: str | None
    actor: str
    detail: dict[str, Any]


@dataclass(frozen=True)
class KeptAnswer:
    """I12: a run's final answer as kept, sealed, for its hand-on."""

    answer: str
    seal: str
    key_id: str
    kept_until: datetime
    handed_on_at: datetime | None


@dataclass(frozen=True)
class Input:
    """A question the model asked through `request_input`, and the input given to it, if any."""

    id: str
    question: str
    status: str  # pending / given
    text: str | None
    given_by: str | None


@dataclass(frozen=True)
class LeftRun:
    """A run left for a process that knows its checkpoint's formats (migration 031): none lives."""

    run_id: str
    state_format: int
    seal_format: int
    last_holder: str | None
    lapsed_at: datetime

    def view(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state_format": self.state_format, "seal_format": self.seal_format,
                "last_holder": self.last_holder, "lapsed_at": self.lapsed_at}  # fmt: skip


@dataclass(frozen=True)
class GivenInput:
    """The question a give-input statement found for an input (I18), as it stood before the statement,
    and whether this statement gave the input to it."""

    id: str
    question: str
    status: str  # pending / given
    text: str | None
    answered_by: str | None  # the request that answered it (migration 021)
    run_status: str
    given: bool


@dataclass(frozen=True)
class Waiting:
    """What a waiting run waits for: an input to a question, or a person's decision on a call."""

    kind: str  # input / approval
    question: str
    approval_id: str | None = None
    question_id: str | None = None  # an input's: what `POST /v1/runs/{id}/input` names
    tool: str | None = None  # an approval's: the call held
    asked_at: datetime | None = None
    step: int = 0
    idx: int = 0
