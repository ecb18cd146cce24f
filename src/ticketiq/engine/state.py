"""The run's durable state as plain data: what a checkpoint holds and seals (I1).

Everything a resume needs is here or in the calls table: the conversation so far, the calls the last
step asked for (with their classes and step keys, so a resume restores rather than recomputes them),
the counters, the step history and the delegation keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ticketiq.tools.base import ToolClass

# The format of the state's JSON this release writes (`checkpoints.state_format`), and the newest it
# reads; it reads every older one still in use (tests/previous_release resumes what the previous release
# wrote). 1: `to_json` as it was when formats were first recorded (release 0.1.0 wrote it without saying
# so). Raise it when the JSON changes in a way the previous release cannot read (a field it would need
# and not find, a meaning changed), and teach `from_json` the older one (resume.py: who reads what).
STATE_FORMAT = 1


@dataclass(frozen=True)
class PlannedCall:
    """One call a model step asked for, as fixed at the checkpoint."""

    idx: int
    id: str  # the provider's tool-call id
    tool: str
    tool_class: ToolClass
    args: dict[str, Any]
    step_key: str | None  # None when the provider id is only a position (I11)
    args_error: str | None = None
    # Not part of the checkpoint: whether the model's arguments held text made storable (I16).
    args_altered: bool = field(default=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        # By hand, not dataclasses.asdict: this runs for every call of every checkpoint.
        return {
            "idx": self.idx, "id": self.id, "tool": self.tool, "tool_class": str(self.tool_class),
            "args": self.args, "step_key": self.step_key, "args_error": self.args_error,
        }  # fmt: skip

    def with_class(self, cls: ToolClass) -> PlannedCall:
        if self.tool_class is cls:
            return self
        return PlannedCall(self.idx, self.id, self.tool, cls, self.args, self.step_key, self.args_error)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PlannedCall:
        return cls(
            idx=int(data["idx"]),
            id=str(data["id"]),
            tool=str(data["tool"]),
            tool_class=ToolClass(data["tool_class"]),
            args=dict(data["args"]),
            step_key=data.get("step_key"),
            args_error=data.get("args_error"),
        )


@dataclass
class RunState:
    agent: str
    correlation_id: str
    agent_loop: str = "main"
    messages: list[dict[str, Any]] = field(default_factory=list)
    step: int = 0  # model steps taken
    calls: list[PlannedCall] = field(default_factory=list)  # what the last step asked for
    prompt_tokens: int = 0
    completion_tokens: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    delegation_keys: dict[str, str] = field(default_factory=dict)  # provider call id -> key
    answer: str | None = None
    # Transcript entries and finished calls (reads, refusals) not yet written to their tables: they
    # ride, sealed, in the checkpoint until a statement that writes them anyway (see driver).
    unflushed: list[dict[str, Any]] = field(default_factory=list)
    unflushed_calls: list[dict[str, Any]] = field(default_factory=list)
    # The W3C traceparent of the request that started the run: its trace's parent (runtime/tracing.py).
    # Written only when there is one, so a run without it keeps the checkpoint text it always had.
    traceparent: str | None = None

    def to_json(self) -> dict[str, Any]:
        found = {
            "agent": self.agent,
            "correlation_id": self.correlation_id,
            "agent_loop": self.agent_loop,
            "messages": self.messages,
            "step": self.step,
            "calls": [c.to_json() for c in self.calls],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "history": self.history,
            "delegation_keys": self.delegation_keys,
            "answer": self.answer,
            "unflushed": self.unflushed,
            "unflushed_calls": self.unflushed_calls,
        }
        if self.traceparent is not None:
            found["traceparent"] = self.traceparent
        return found

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        return cls(
            agent=data["agent"],
            correlation_id=data["correlation_id"],
            agent_loop=data.get("agent_loop", "main"),
            messages=list(data.get("messages", [])),
            step=int(data.get("step", 0)),
            calls=[PlannedCall.from_json(c) for c in data.get("calls", [])],
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            history=list(data.get("history", [])),
            delegation_keys=dict(data.get("delegation_keys", {})),
            answer=data.get("answer"),
            unflushed=list(data.get("unflushed", [])),
            unflushed_calls=list(data.get("unflushed_calls", [])),
            traceparent=data.get("traceparent"),
        )
