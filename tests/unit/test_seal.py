from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.seal import canonical, load_keys, parse_keys, seal, verify
from ticketiq.errors import ConfigError, SealInvalid
from ticketiq.settings import Settings

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_a_sealed_checkpoint_verifies(state: object) -> None:
    keys = parse_keys("k1:secret-one")
    text = canonical(state).decode()
    mac, key_id = seal(keys, "run-1", 3, text)
    verify(keys, "run-1", 3, text, mac, key_id)


def test_any_change_fails_verification() -> None:
    keys = parse_keys("k1:secret-one")
    state = canonical({"messages": [{"role": "user", "content": "hi"}], "step": 2}).decode()
    mac, key_id = seal(keys, "run-1", 2, state)
    tampered = canonical({"messages": [{"role": "user", "content": "hi!"}], "step": 2}).decode()
    with pytest.raises(SealInvalid, match="does not match"):
        verify(keys, "run-1", 2, tampered, mac, key_id)
    with pytest.raises(SealInvalid):
        verify(keys, "run-1", 3, state, mac, key_id)  # another step
    with pytest.raises(SealInvalid):
        verify(keys, "run-2", 2, state, mac, key_id)  # another run's checkpoint


def test_the_first_key_signs_and_every_key_verifies() -> None:
    old = parse_keys("old:s1")
    rotated = parse_keys("new:s2,old:s1")
    mac, key_id = seal(old, "r", 1, '{"a":1}')
    verify(rotated, "r", 1, '{"a":1}', mac, key_id)
    assert seal(rotated, "r", 1, '{"a":1}')[1] == "new"
    with pytest.raises(SealInvalid, match="unknown key id"):
        verify(parse_keys("other:s3"), "r", 1, '{"a":1}', mac, key_id)


@pytest.mark.parametrize("spec", ["", "nocolon", ":secret", "id:", "a:1,a:2"])
def test_malformed_key_specs_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_keys(spec)


def test_a_generated_key_is_kept_in_home_with_mode_0600(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    first = load_keys(settings)
    mode = stat.S_IMODE(os.stat(tmp_path / "seal.key").st_mode)
    assert mode == 0o600
    assert load_keys(settings).signing_id == first.signing_id
    assert "secret" not in repr(first) and first.secrets[first.signing_id].decode() not in repr(first)
    os.chmod(tmp_path / "seal.key", 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_keys(settings)


@given(json_values)
def test_the_seal_is_hmac_sha256_over_run_step_and_text_whether_given_text_or_bytes(state: object) -> None:
    keys = parse_keys("k1:secret-one")
    body = canonical(state)
    expected = hmac.new(b"secret-one", b"run-1\n7\n" + body, hashlib.sha256).hexdigest()
    assert seal(keys, "run-1", 7, body) == (expected, "k1")
    assert seal(keys, "run-1", 7, body.decode()) == (expected, "k1")
