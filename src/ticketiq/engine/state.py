"""The run's durable state as plain data: what a checkpoint holds and seals (I1).

Everything a resume needs is here or in the calls table: the conversation so far, the calls the last
step asked for (with their classes and step keys, so a resume restores rather than recomputes them),
the counters, the step history and the delegation keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ticketiq.engine.seal import canonical
from ticketiq.tools.base import ToolClass


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

    def to_json(self) -> dict[str, Any]:
        # By hand, not dataclasses.asdict: this runs for every call of every checkpoint.
        return {
            "idx": self.idx, "id": self.id, "tool": self.tool, "tool_class": self.tool_class.value,
            "args": self.args, "step_key": self.step_key, "args_error": self.args_error,
        }  # fmt: skip

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


# The state's lists that grow a little each step; see RunState.canonical.
_GROWING = ("messages", "history", "unflushed", "unflushed_calls")


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
    # The canonical text of each item of the lists that only grow, kept beside the very object it was
    # made from, so a step serializes what it added rather than the whole conversation again. Items
    # are never changed in place (a replaced item is a new object and gets a new text).
    _texts: dict[str, list[tuple[Any, bytes]]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def canonical(self) -> bytes:
        """The checkpoint's text: the same bytes as seal.canonical(self.to_json())."""
        data = self.to_json()
        for name in _GROWING:
            data[name] = orjson.Fragment(self._list_text(name, data[name]))
        try:
            return orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
        except (orjson.JSONEncodeError, TypeError):
            return canonical(self.to_json())  # what orjson refuses (see seal.canonical)

    def _list_text(self, name: str, items: list[Any]) -> bytes:
        texts = self._texts.setdefault(name, [])
        same = 0
        for (made_from, _), item in zip(texts, items, strict=False):
            if made_from is not item:
                break
            same += 1
        del texts[same:]
        texts += [(item, canonical(item)) for item in items[same:]]
        return b"[" + b",".join(text for _, text in texts) + b"]"

    def to_json(self) -> dict[str, Any]:
        return {
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
        )
