"""What a tool is: its schema, its class, its executor and, where the vendor allows, its reader.

The engine decides what to do with a call from its class (I2, I9, I10); adapters only speak their
vendor's API. An adapter never decides whether to resend: it sends once (retrying only what the vendor
did not take, such as a 429) and reports what it saw.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from ticketiq.settings import Settings


class ToolClass(StrEnum):
    # str(member) is its value (a StrEnum); every step writes str(c) for a row or an entry, a C call,
    # where `.value` is the enum module's Python property.
    READ = "read"
    WRITE = "write"
    KEYED_WRITE = "keyed_write"  # a write its vendor dedupes on our key, for dedupe_window_s
    # A write that changes nothing more when sent again with the same arguments (a trusted MCP server's
    # idempotent, non-destructive tool, or the operator's word): still marked in doubt before it is sent.
    IDEMPOTENT_WRITE = "idempotent_write"
    DELEGATION = "delegation"
    REMOTE_AGENT = "remote_agent"
    SUBAGENT = "subagent"  # a sub-agent with tools

    @property
    def changes(self) -> bool:
        """Every class but a read changes something and is marked in doubt before it is sent (I2)."""
        return self is not ToolClass.READ


@dataclass(frozen=True)
class SendWindow:
    """I14: when the tries of one write may be sent and how long each may last, by the monotonic clock.

    Its budget starts before the in-doubt mark is sent (so it ends no later than the mark plus the
    budget on the database clock). No try starts after the budget or after the lease deadline the
    process had at the mark; a try lasts at most until the budget ends. So the mark can record the
    latest moment the write can be in flight, and a resume reads it back only after that.
    """

    budget_ends: float
    lease_deadline: float

    def may_send(self, now: float) -> bool:
        return now < min(self.budget_ends, self.lease_deadline)

    def try_timeout(self, now: float, request_timeout_s: float) -> float:
        return max(0.0, min(request_timeout_s, self.budget_ends - now))


@dataclass(frozen=True)
class CallContext:
    """Everything an executor or reader needs for one call."""

    run_id: str
    tool: str
    args: dict[str, Any]
    # The idempotency key to send: the step key (I11), the approval key, or a fresh one where none
    # derives. Adapters put it where their vendor dedupes or can find it again (a body field, a nonce,
    # a comment property, a card field).
    key: str
    http: httpx.AsyncClient
    settings: Settings
    # Called before every request the adapter sends, and again as its bytes are written (tools/http.py:
    # last_check, which adds the write's window, I14): raises LeaseLost once the lease was lost or its
    # deadline passed (I3), so no write leaves the process after it may have been taken over.
    before_send: Callable[[], None] = lambda: None
    # A write's window (I14); None for reads and readers.
    window: SendWindow | None = None
    # For a reader: what the call's send recorded to be found again by (a remote agent's task id).
    reference: str | None = None
    # Set the moment the run's lease is lost: a call that can be cancelled mid-flight (an MCP request, by
    # `notifications/cancelled`) is cancelled then rather than left to run out its window.
    lost: asyncio.Event | None = None
    # For a write being sent: records such a reference the moment the vendor names it, fenced by the
    # attempt, so a resume can read the call back by it rather than call it unknown (I9).
    on_reference: Callable[[str], Awaitable[None]] | None = None


@dataclass(frozen=True)
class Outcome:
    """What a call came to. `result` goes back to the model as the tool's result (JSON-able)."""

    ok: bool
    result: Any = None
    error: str | None = None
    # True when the vendor answered in a way that leaves it unknown whether the write took effect
    # (a timeout, a 5xx after the body was sent): the engine settles such a call, never resends it.
    uncertain: bool = False

    def for_model(self) -> Any:
        if self.ok:
            return self.result
        return {"error": self.error or "failed"}


@dataclass(frozen=True)
class ReadBack:
    """What a reader found: `found` True with the outcome, False (the write did not land), or None
    when the vendor cannot tell."""

    found: bool | None
    outcome: Outcome | None = None


Executor = Callable[[CallContext], Awaitable[Outcome]]
Reader = Callable[[CallContext], Awaitable[ReadBack]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments
    tool_class: ToolClass
    executor: Executor
    reader: Reader | None = None
    dedupe_window_s: float | None = None  # for keyed writes: how long the vendor dedupes on the key
    vendor: str = ""

    def openai_spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass
class Registry:
    tools: dict[str, Tool] = field(default_factory=dict)

    def register(self, tool: Tool) -> None:
        if tool.name in self.tools:
            raise ValueError(f"tool {tool.name} is registered twice")
        self.tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self.tools.get(name)

    def specs(self, names: list[str]) -> list[dict[str, Any]]:
        return [self.tools[n].openai_spec() for n in names if n in self.tools]
