"""How deep a JSON body nests, judged before anything parses it (the StorableText middleware): the
depth json.loads would recurse to, counted without recursion, whatever the text holds in its strings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.entries import text_guard
from ticketiq.values.json_depth import MAX_DEPTH, nesting, too_deep

any_text = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=20)
# Brackets, quotes and backslashes in strings and keys: what a naive count would get wrong.
tricky = st.text(alphabet='[]{}"\\ \n\x00\ud800x', max_size=12) | any_text
values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | tricky,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky, inner, max_size=3),
    max_leaves=30,
)


def depth(value: Any) -> int:
    """The reference: how deep a parsed value nests."""
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@given(value=values, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]))
def test_the_nesting_of_a_json_text_is_the_depth_of_its_value(value: Any, ascii_only: bool, indent: int | None) -> None:
    assert nesting(json.dumps(value, ensure_ascii=ascii_only, indent=indent)) == depth(value)


def wrapped(n: int, inner: str = "") -> str:
    return "[" * n + inner + "]" * n


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32-be"])
def test_a_body_is_too_deep_past_the_limit_in_every_encoding_json_reads(encoding: str) -> None:
    assert not too_deep(wrapped(MAX_DEPTH).encode(encoding))
    assert too_deep(wrapped(MAX_DEPTH + 1).encode(encoding))
    assert too_deep(('{"a": ' + wrapped(MAX_DEPTH) + "}").encode(encoding))
    assert too_deep(("\n " + wrapped(100_000)).encode(encoding))


def test_brackets_in_strings_and_text_that_is_no_array_or_object_do_not_count() -> None:
    inside = json.dumps({"input": "[{" * 10_000 + '\\"' + "}]" * 10_000, "q": ['"]'] * 3})
    assert nesting(inside) == 2 and not too_deep(inside.encode())
    # Not an array or object: json.loads takes or refuses it without recursing, so it cannot nest.
    for text in ("hello " + wrapped(1000), '"a"' + wrapped(1000), "12" + wrapped(1000), "", "   "):
        assert nesting(text) == 0 and not too_deep(text.encode())
    # Unbalanced, or not JSON past its start: counted as written (json.loads would recurse as deep).
    assert nesting("[" * 100 + "x") == 100
    assert not too_deep(b"\xff\xfe\xfd" + b"[" * 100)  # no encoding json.loads reads: it recurses into nothing


def test_json_that_got_past_the_count_is_still_refused_not_answered_500(monkeypatch: pytest.MonkeyPatch) -> None:
    # The last guard: should the count ever miss a body, json.loads' RecursionError is refused all the same.
    monkeypatch.setattr(text_guard, "too_deep", lambda body: False)
    scope = {"type": "http", "path": "/v1/runs", "query_string": b""}
    refused = text_guard.refusal_of(scope, wrapped(100_000).encode())
    assert refused is not None and refused.status_code == 422
    assert json.loads(bytes(refused.body))["detail"][0]["loc"] == ["body"]
