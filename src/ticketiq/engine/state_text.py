"""The checkpoint's text, built step by step rather than from scratch at every step (I1).

A run's conversation and its step history only grow: the driver appends to them and never changes an
entry once it has joined. Serialized whole at every step, a run's checkpoints cost time in the square
of its length (at step 40 of a read-only agent, 12.5 of 14 KB of state are conversation). Here each
entry is serialized once, when it joins, its bytes kept, and the state around them serialized at each
step: the same bytes as `seal.canonical(state.to_json())`, which is what the seal covers and what a
resume verifies (the stored text itself, never a re-serialization).
"""

from __future__ import annotations

from typing import Any

import orjson

from ticketiq.engine import seal
from ticketiq.engine.state import RunState

_SORTED = orjson.OPT_SORT_KEYS


class GrownList:
    """The canonical text of one list that only grows: each item serialized once. A list replaced (a
    resume reads a new state) or shorter than what was kept starts the text afresh."""

    __slots__ = ("items", "parts")

    def __init__(self) -> None:
        self.items: list[Any] | None = None
        self.parts: list[bytes] = []

    def fragment(self, items: list[Any]) -> orjson.Fragment:
        parts = self.parts
        if items is not self.items or len(items) < len(parts):
            self.items, self.parts = items, []
            parts = self.parts
        for item in items[len(parts) :]:
            parts.append(orjson.dumps(item, option=_SORTED))
        return orjson.Fragment(b"[" + b",".join(parts) + b"]")


class StateText:
    """One run's checkpoint text under one driver: its conversation and history kept as text."""

    __slots__ = ("history", "messages")

    def __init__(self) -> None:
        self.messages = GrownList()
        self.history = GrownList()

    def of(self, state: RunState) -> bytes:
        """`seal.canonical(state.to_json())`, byte for byte. What orjson refuses (an integer beyond 64
        bits) takes canonical's own way, over the whole state, and is kept by nothing."""
        value = state.to_json()
        try:
            value["messages"] = self.messages.fragment(state.messages)
            value["history"] = self.history.fragment(state.history)
            return orjson.dumps(value, option=_SORTED)
        except (orjson.JSONEncodeError, TypeError):
            self.messages, self.history = GrownList(), GrownList()
            return seal.canonical(state.to_json())
