from __future__ import annotations

import base64
import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.step_keys import (
    KEY_LENGTH,
    _compact,
    approval_key,
    fresh_key,
    is_position_only,
    run_call_key,
    workflow_step_key,
)

ids = st.text(min_size=1, max_size=40).filter(lambda s: not is_position_only(s))
parts = st.tuples(st.text(max_size=40), st.text(max_size=20), st.integers(0, 10_000), ids)


@given(parts)
def test_equal_inputs_give_equal_keys(p: tuple[str, str, int, str]) -> None:
    assert run_call_key(*p) == run_call_key(*p)
    key = run_call_key(*p)
    assert key is not None
    assert len(key) == KEY_LENGTH  # fits Discord's 25-character nonce


@given(parts, parts)
def test_keys_differ_when_any_part_differs(a: tuple[str, str, int, str], b: tuple[str, str, int, str]) -> None:
    if a != b:
        assert run_call_key(*a) != run_call_key(*b)


@given(st.integers(0, 1000), st.text(max_size=30), st.integers(0, 100))
def test_position_only_ids_yield_no_key(position: int, correlation: str, steps: int) -> None:
    assert run_call_key(correlation, "main", steps, f"call_{position}") is None
    assert run_call_key(correlation, "main", steps, str(position)) is None


def test_provider_ids_that_merely_start_like_positions_are_identities() -> None:
    assert run_call_key("r", "main", 1, "call_0abc") is not None
    assert run_call_key("r", "main", 1, "call_Xk3") is not None


def test_workflow_keys_repeat_on_retry_and_change_on_loop_back() -> None:
    assert workflow_step_key("wf", "notify", 3) == workflow_step_key("wf", "notify", 3)
    assert workflow_step_key("wf", "notify", 3) != workflow_step_key("wf", "notify", 4)


def test_approval_key_is_the_same_however_often_it_is_sent_and_fresh_keys_are_not() -> None:
    assert approval_key("a-1") == approval_key("a-1") != approval_key("a-2")
    assert fresh_key() != fresh_key()
    assert len(fresh_key()) == KEY_LENGTH


@given(parts)
def test_keys_are_the_documented_derivation_so_they_never_change_between_versions(p: tuple[str, str, int, str]) -> None:
    # A run resumed by a newer process must send the key the older one sent: the derivation is fixed
    # as the first 23 base32 characters of SHA-256 over the compact JSON of the parts.
    text = json.dumps(["tq", *p], separators=(",", ":"), ensure_ascii=False)
    expected = "tq" + base64.b32encode(hashlib.sha256(text.encode()).digest()).decode().lower()[:23]
    assert run_call_key(*p) == expected


@given(st.lists(st.one_of(st.text(max_size=30), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False)),
                max_size=5))  # fmt: skip
def test_the_assembled_text_is_the_encoders_own_for_every_kind_of_part(p: list[object]) -> None:
    # Strings and ints are put together without the encoder (a bool, None or a float goes through it):
    # either way the text hashed is exactly what json.dumps makes of the parts.
    assert _compact("tw", p) == json.dumps(["tw", *p], separators=(",", ":"), ensure_ascii=False)


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, 10_000))
def test_workflow_and_approval_keys_are_the_documented_derivation(run: str, step: str, executed: int) -> None:
    def documented(prefix: str, parts: list[object]) -> str:
        text = json.dumps([prefix, *parts], separators=(",", ":"), ensure_ascii=False)
        return prefix + base64.b32encode(hashlib.sha256(text.encode()).digest()).decode().lower()[:23]

    assert workflow_step_key(run, step, executed) == documented("tw", [run, step, executed])
    assert approval_key(run) == documented("ta", [run])
