from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.values.storable import is_storable, storable, unstorable_at

# Every code point Python can hold, lone surrogates and NUL included.
any_text = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=30)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=25,
)


def all_text(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (all_text(k) + all_text(v))]
    if isinstance(value, list):
        return [t for v in value for t in all_text(v)]
    return []


@given(json_values)
def test_what_storable_returns_postgres_can_store_and_it_says_when_it_changed_anything(value: Any) -> None:
    clean, altered = storable(value)
    assert all(is_storable(t) for t in all_text(clean))
    for text in all_text(clean):
        text.encode("utf-8")  # no lone surrogate left: it encodes
        assert "\x00" not in text
    assert altered == (unstorable_at(value) is not None)
    if not altered:
        assert clean is value  # nothing copied when nothing changed
    assert storable(clean) == (clean, False)


def test_unstorable_at_names_the_path_of_the_first_bad_text() -> None:
    assert unstorable_at({"agent": "a", "input": "x\x00"}) == ("input",)
    assert unstorable_at({"a": [1, {"b": "\ud800"}]}) == ("a", 1, "b")
    assert unstorable_at({"bad\x00key": 1}) == ("bad\x00key",)
    assert unstorable_at(["fine", "also fine"]) is None
    assert storable("a\x00b\udc00c") == ("a\ufffdb\ufffdc", True)
