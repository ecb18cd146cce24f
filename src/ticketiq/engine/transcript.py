"""Transcript entries: what a person reads of a run. Built here, written by the statements they
describe (so an entry saying "checkpoint written" lands only if the checkpoint did)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import orjson

from ticketiq.engine.gates import GateDecision
from ticketiq.engine.state import PlannedCall

_MAX_RESULT_CHARS = 2000


class Timing(NamedTuple):
    """A model step's times, for the run's timeline: the attempt that asked, when the model call began
    (epoch seconds of the asking process's wall clock) and how long it took (its monotonic clock)."""

    attempt: int
    started_at: float
    model_s: float


def entry(kind: str, **body: Any) -> dict[str, Any]:
    return {"kind": kind, "body": body}


def _to(value: float, scale: float) -> float:
    """`value` to the nearest 1/scale: round(value, n) for a scale of 10**n, without round's exact decimal
    conversion (1.2 us a call, twice a step; this 0.1). It may be one off round's in the last place kept:
    a microsecond of an epoch time, which a double holds to a quarter of one."""
    return math.floor(value * scale + 0.5) / scale


def _timed(timing: Timing | None) -> dict[str, Any]:
    if timing is None:
        return {}
    return {"attempt": timing.attempt, "started_at": _to(timing.started_at, 1e6),
            "model_ms": _to(timing.model_s * 1000.0, 1e3)}  # fmt: skip


def model_step(
    step: int, calls: list[PlannedCall], text: str | None, tokens: int, timing: Timing | None = None
) -> dict[str, Any]:
    return entry(
        "model_step",
        step=step,
        text=text,
        tokens=tokens,
        calls=[{"id": c.id, "tool": c.tool, "class": str(c.tool_class), "key": c.step_key} for c in calls],
        **_timed(timing),
    )


def model_answer(step: int, tokens: int, timing: Timing) -> dict[str, Any]:
    """The model's last step, which answered in text (the answer is its own entry)."""
    return entry("model_answer", step=step, tokens=tokens, **_timed(timing))


def gate(step: int, call: PlannedCall, decision: GateDecision) -> dict[str, Any]:
    return entry(
        "gate",
        step=step,
        idx=call.idx,
        tool=call.tool,
        verdict=str(decision.verdict),
        gate=decision.gate,
        reason=decision.reason,
    )


def statement(what: str, **detail: Any) -> dict[str, Any]:
    return entry("statement", what=what, statements=1, **detail)


def call_result(step: int, call: PlannedCall, key: str | None, ok: bool, result: Any, how: str) -> dict[str, Any]:
    return entry(
        "call",
        step=step,
        idx=call.idx,
        tool=call.tool,
        cls=str(call.tool_class),
        key=key,
        ok=ok,
        how=how,
        result=clip(result),
    )


def text_altered(step: int, where: str) -> dict[str, Any]:
    """I16: text Postgres cannot store (NUL, lone surrogates) was replaced with U+FFFD."""
    return entry("text_altered", step=step, where=where, replaced_with="U+FFFD")


def clip(value: Any) -> Any:
    """Keep transcripts readable: a long result is cut, with a note saying so."""
    text = orjson.dumps(value, default=str)
    if len(text) <= _MAX_RESULT_CHARS:
        return value
    head = text.decode(errors="replace")[:_MAX_RESULT_CHARS]
    return {"truncated": True, "chars": len(text), "head": head}


def scrub(value: Any, secrets: list[str]) -> Any:
    """Replace any secret that a vendor echoed back before it reaches a transcript or the model."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if secret in value:
                value = value.replace(secret, "***")
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value
