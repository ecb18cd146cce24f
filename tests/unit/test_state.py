from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.seal import canonical
from ticketiq.engine.state import RunState

scalars = st.none() | st.booleans() | st.integers(-(10**70), 10**70) | st.text(max_size=12)
messages = st.dictionaries(
    st.sampled_from(["role", "content", "tool_call_id", "name", "é"]),
    st.recursive(
        scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_size=4,
)
# Each step appends some messages, and now and then puts a new object in place of an earlier one.
steps = st.lists(
    st.tuples(st.lists(messages, max_size=3), st.none() | st.tuples(st.integers(0, 20), messages)), max_size=8
)


@given(steps)
def test_the_checkpoint_text_is_the_canonical_json_of_the_state_after_every_step(
    plan: list[tuple[list[dict[str, Any]], tuple[int, dict[str, Any]] | None]],
) -> None:
    state = RunState(agent="a", correlation_id="c", messages=[{"role": "system", "content": "s"}])
    for step, (appended, replaced) in enumerate(plan, start=1):
        state.step = step
        state.messages += appended
        if replaced is not None and state.messages:
            index, message = replaced
            state.messages[index % len(state.messages)] = message
        state.history.append({"step": step, "calls": []})
        state.unflushed += [{"kind": "note", "body": m} for m in appended]
        if step % 3 == 0:
            state.unflushed = []  # flushed: the list starts again
        assert state.canonical() == canonical(state.to_json())
