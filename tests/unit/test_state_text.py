"""The checkpoint text built step by step is the whole state's canonical text, byte for byte (I1, I17):
the seal covers the stored text and a resume reads the state back from it."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ticketiq.engine.seal import canonical
from ticketiq.engine.state import PlannedCall, RunState
from ticketiq.engine.state_text import StateText
from ticketiq.tools.base import ToolClass

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
messages = st.dictionaries(st.sampled_from(["role", "content", "tool_call_id", "tool_calls", "z", "a"]), values)


def a_state() -> RunState:
    return RunState(
        agent="reads",
        correlation_id="run-1",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "OPS-1 é \u2028 \x01"}],
    )


def step(state: RunState, i: int) -> None:
    """What the driver does to a state in a read-only step."""
    state.messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "n": "é\n"}]})
    state.step += 1
    state.calls = [PlannedCall(0, f"c{i}", "read", ToolClass.READ, {"note": "x"}, f"tq{i}")]
    state.history.append({"step": state.step, "calls": ["read"]})
    state.unflushed += [{"kind": "statement", "body": {"step": state.step}}]
    state.messages.append({"tool_call_id": f"c{i}", "role": "tool", "content": '{"b":1,"a":2}'})


def test_a_run_of_steps_has_the_whole_states_text_at_every_step() -> None:
    state, text = a_state(), StateText()
    for i in range(30):
        step(state, i)
        assert text.of(state) == canonical(state.to_json())
        if i % 7 == 6:
            state.unflushed = []  # a flush takes them: a list replaced
            assert text.of(state) == canonical(state.to_json())


@settings(max_examples=200)
@given(st.lists(st.lists(messages, max_size=3), min_size=1, max_size=5))
def test_any_conversation_grown_in_any_steps_has_the_whole_states_text(steps: list[list[dict[str, object]]]) -> None:
    state, text = a_state(), StateText()
    for added in steps:
        state.messages += added
        state.history.append({"added": len(added)})
        assert text.of(state) == canonical(state.to_json())


def test_a_state_read_back_anew_is_serialized_anew() -> None:
    """A resume replaces the state: its lists are other objects, perhaps no longer, with other entries."""
    state, text = a_state(), StateText()
    for i in range(3):
        step(state, i)
    text.of(state)
    other = RunState.from_json(json.loads(canonical(a_state().to_json())))
    other.messages.append({"role": "user", "content": "another run's"})
    assert text.of(other) == canonical(other.to_json())
    assert b"another run's" in text.of(other) and b"tool_calls" not in text.of(other)


def test_a_list_cut_shorter_in_place_is_serialized_anew() -> None:
    state, text = a_state(), StateText()
    for i in range(4):
        step(state, i)
    text.of(state)
    del state.messages[2:]
    state.messages.append({"role": "user", "content": "after the cut"})
    assert text.of(state) == canonical(state.to_json())


def test_what_orjson_refuses_takes_canonicals_own_way_and_the_text_comes_back_after() -> None:
    state, text = a_state(), StateText()
    step(state, 0)
    text.of(state)
    state.messages.append({"role": "tool", "content": 2**70})  # beyond 64 bits: the standard library's way
    assert text.of(state) == canonical(state.to_json())
    assert b"1180591620717411303424" in text.of(state)
    state.messages.pop()
    step(state, 1)
    assert text.of(state) == canonical(state.to_json())
