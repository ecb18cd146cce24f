"""A person's ad hoc tool call from the inspector (`POST /v1/inspector/calls`): thin I/O around the
pure `inspector_gate`.

The call passes the gates as they stand now, with the operator (the token's name) as the run-as
principal, on the `inspector` channel, for a tenant (`default` unless named). It is sent once, with a
key fresh per call (I11: it belongs to no scope a key could derive from), a write bounded by the write
budget (I14). Nothing is written ahead for a resume: a call cut off by a crash is never sent again by
anyone, and one whose outcome the vendor left open is reported uncertain, never resent.

A request with an Idempotency-Key names its call: the call's key derives from the token and that key
(`step_keys.inspector_key`), and a write's start is on record once per key. A retry of the request
after its process died (the key taken over, its answer never kept) finds the start and does not send
the write again: it answers the outcome on record, or uncertain when the first try died mid-send.

The audit log is what it leaves: `inspector.call` (its outcome, or its refusal) before the answer; a
write is preceded by `inspector.call.started` with the same key, so a call whose process died before
its outcome was known is still on record; such a retry leaves `inspector.call.retried`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ticketiq.engine.context import EngineDeps
from ticketiq.engine.gates import GateDecision, inspector_gate
from ticketiq.engine.step_keys import fresh_key, inspector_key
from ticketiq.engine.transcript import scrub
from ticketiq.errors import RequestError, StorageError
from ticketiq.storage.inspector_store import InspectorStore
from ticketiq.tools.base import CallContext, Outcome, SendWindow, Tool, ToolClass
from ticketiq.tools.schema import validate
from ticketiq.values.storable import storable

log = logging.getLogger(__name__)

CHANNEL = "inspector"
# The tenant a call is contained as when the request names none: the agents file's default tenant.
DEFAULT_TENANT = "default"
# These start an agent run rather than call a vendor: a person starts a run for that (`POST /v1/runs`).
_RUNS_AN_AGENT = frozenset({ToolClass.DELEGATION, ToolClass.SUBAGENT})
# Calls still being sent and audited after their requester went away (kept so they are not collected).
_UNFINISHED: set[asyncio.Task[AdHocCall]] = set()
NOT_SENT_AGAIN = ("an earlier request with this Idempotency-Key began this write and its outcome was never recorded "
                  "(its process died): it was not sent again, and whether it took effect is unknown")  # fmt: skip


@dataclass(frozen=True)
class AdHocCall:
    """What an ad hoc call came to. `refused`: the gate that refused it (nothing was sent, no key)."""

    tool: str
    key: str | None
    ok: bool
    result: Any
    error: str | None
    uncertain: bool
    audit_id: int | None  # None only when the outcome could not be audited after the call was sent
    refused: GateDecision | None = None

    def shown(self) -> dict[str, Any]:
        return {"tool": self.tool, "key": self.key, "ok": self.ok, "result": self.result, "error": self.error,
                "uncertain": self.uncertain, "audit_id": self.audit_id}  # fmt: skip


def args_problem(schema: Mapping[str, Any], args: dict[str, Any]) -> tuple[str, str] | None:
    """(the field to name, every problem in one sentence) when `args` do not fit the tool's schema: the
    field is the first top-level argument at fault, `body.args` when none is singled out."""
    problem = validate(schema, args)
    if problem is None:
        return None
    properties: Mapping[str, Any] = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    at_fault = [name for name in schema.get("required", []) if name not in args]
    for name, value in args.items():
        own = properties.get(name, extra if isinstance(extra, Mapping) else None)
        if (own is None and extra is False) or (own is not None and validate(own, value) is not None):
            at_fault.append(name)
    return (f"body.args.{at_fault[0]}" if at_fault else "body.args"), f"arguments rejected: {problem}"


def args_digest(args: dict[str, Any]) -> str:
    """The SHA-256 of the arguments in canonical JSON: identical calls show the same digest."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def outcome_word(outcome: Outcome) -> str:
    return "ok" if outcome.ok else "uncertain" if outcome.uncertain else "error"


class Inspector:
    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps
        self.store = InspectorStore(deps.db)

    def checked(self, name: str, args: dict[str, Any]) -> Tool:
        """The tool a request names, its arguments fitting its schema; else a 422 naming the field."""
        tool = self.deps.registry.get(name)
        if tool is None:
            tools = self.deps.registry.tools
            known = ", ".join(sorted(n for n, t in tools.items() if t.tool_class not in _RUNS_AN_AGENT))
            raise RequestError("body.tool", f"no tool named {name!r}; known: {known}")
        if tool.tool_class in _RUNS_AN_AGENT:
            raise RequestError("body.tool", f"tool {name} runs an agent, not an ad hoc call: start a run instead")
        problem = args_problem(tool.parameters, args)
        if problem is not None:
            raise RequestError(*problem)
        return tool

    async def call(
        self, name: str, args: dict[str, Any], by: str, tenant: str = DEFAULT_TENANT, request_key: str | None = None
    ) -> AdHocCall:
        """Make the call `by` asked for, or refuse it at the gate; either way audited before the answer.
        `request_key`: the request's Idempotency-Key, which names the call (see the module)."""
        tool = self.checked(name, args)
        facts = await self.store.facts(by, tenant, CHANNEL)
        decision = inspector_gate(facts, tool.name)
        gate = {"verdict": decision.verdict.value, "gate": decision.gate, "reason": decision.reason}
        # The arguments as sent, with any secret of the process masked (in the digest too: no guess at a
        # secret can be checked against it).
        shown = scrub(args, self.deps.settings.secrets())
        about = {"tool": tool.name, "class": tool.tool_class.value, "tenant": tenant, "gate": gate,
                 "args": shown, "args_sha256": args_digest(shown)}  # fmt: skip
        if not decision.allowed:
            audit_id = await self.store.audit("inspector.call", by, {**about, "key": None, "outcome": "refused"})
            return AdHocCall(tool.name, None, False, None, decision.reason, False, audit_id, refused=decision)
        # I11: without a request key outside every scope, so new per call: two identical calls are two calls.
        key = fresh_key() if request_key is None else inspector_key(by, request_key)
        # Before the send, so a write whose process dies mid-call is on record; no resume reads it.
        if tool.tool_class.changes and await self.store.start(by, {**about, "key": key}) is None:
            return await self._begun_before(tool, key, by, about)
        # A requester that hangs up does not cut the send off before its outcome is audited.
        made = asyncio.ensure_future(self._made(tool, args, key, by, {**about, "key": key}))
        _UNFINISHED.add(made)
        made.add_done_callback(_UNFINISHED.discard)
        return await asyncio.shield(made)

    async def _begun_before(self, tool: Tool, key: str, by: str, about: dict[str, Any]) -> AdHocCall:
        """A keyed request's write an earlier try began: never sent again. Answered with the outcome on
        record, else as uncertain. I20: the retry's own audit row is written before it answers, so the
        start it found is as durable as that write."""
        earlier = await self.store.outcome(key)
        found = "no outcome" if earlier is None else earlier.outcome
        retried = await self.store.audit("inspector.call.retried", by, {**about, "key": key, "found": found})
        log.warning("inspector call %s of %s by %s was begun by an earlier request with its Idempotency-Key (%s): "
                    "not sent again", key, tool.name, by, found)  # fmt: skip
        if earlier is None:
            return AdHocCall(tool.name, key, False, None, NOT_SENT_AGAIN, True, retried)
        uncertain = earlier.outcome == "uncertain"
        return AdHocCall(tool.name, key, earlier.outcome == "ok", None, earlier.error, uncertain, earlier.audit_id)

    async def _made(self, tool: Tool, args: dict[str, Any], key: str, by: str, about: dict[str, Any]) -> AdHocCall:
        outcome = await self._send(tool, args, key)
        detail, _ = storable({**about, "outcome": outcome_word(outcome), "error": outcome.error})
        audit_id: int | None
        try:
            audit_id = await self.store.audit("inspector.call", by, detail)
        except StorageError as exc:
            # The call was made: its outcome is answered all the same, so no one sends it again to learn it.
            log.error("inspector call %s of %s by %s was made (%s) but not audited: %s", key, tool.name, by,
                      outcome_word(outcome), exc)  # fmt: skip
            audit_id = None
        return AdHocCall(tool.name, key, outcome.ok, outcome.result, outcome.error, outcome.uncertain, audit_id)

    async def _send(self, tool: Tool, args: dict[str, Any], key: str) -> Outcome:
        settings = self.deps.settings
        window = None
        if tool.tool_class.changes:
            # I14: no lease bounds an ad hoc call, so the budget alone does.
            ends = time.monotonic() + settings.write_budget_s
            window = SendWindow(budget_ends=ends, lease_deadline=ends)
        ctx = CallContext(run_id=f"inspector:{key}", tool=tool.name, args=args, key=key, http=self.deps.http,
                          settings=settings, window=window)  # fmt: skip
        try:
            return await tool.executor(ctx)
        except Exception as exc:  # the adapters report vendor failures as outcomes: this is a bug
            log.exception("inspector call %s of %s failed in the engine", key, tool.name)
            # A write may have gone out before it failed: open, never resent.
            error = f"{tool.name} failed in the engine ({type(exc).__name__})"
            return Outcome(ok=False, error=error, uncertain=tool.tool_class.changes)
