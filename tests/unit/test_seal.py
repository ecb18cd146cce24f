from __future__ import annotations

import hashlib
import hmac
import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.seal import (
    Chain,
    canonical,
    check_counters,
    check_probe,
    load_keys,
    parse_keys,
    probe,
    seal,
    verify,
)
from ticketiq.errors import ConfigError, SealInvalid
from ticketiq.settings import Settings

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
CHAIN = Chain("run-1", 3, attempt=2, losses=1, prev_seal="abc")


@given(json_values)
def test_a_sealed_checkpoint_verifies(state: object) -> None:
    keys = parse_keys("k1:secret-one")
    text = canonical(state).decode()
    mac, key_id = seal(keys, CHAIN, text)
    verify(keys, CHAIN, text, mac, key_id)


def test_any_change_fails_verification() -> None:
    keys = parse_keys("k1:secret-one")
    state = canonical({"messages": [{"role": "user", "content": "hi"}], "step": 3}).decode()
    mac, key_id = seal(keys, CHAIN, state)
    tampered = canonical({"messages": [{"role": "user", "content": "hi!"}], "step": 3}).decode()
    with pytest.raises(SealInvalid, match="does not match"):
        verify(keys, CHAIN, tampered, mac, key_id)
    # I17: each thing the seal covers besides the text: the run, the step, the attempt that wrote it,
    # the loss count it knew and the seal it replaced.
    for other in (
        Chain("run-2", 3, 2, 1, "abc"),
        Chain("run-1", 4, 2, 1, "abc"),
        Chain("run-1", 3, 1, 1, "abc"),
        Chain("run-1", 3, 2, 0, "abc"),
        Chain("run-1", 3, 2, 1, "abd"),
        Chain("run-1", 3, 2, 1, None),
    ):
        with pytest.raises(SealInvalid):
            verify(keys, other, state, mac, key_id)


def test_a_checkpoint_sealed_before_the_chain_verifies_as_format_1() -> None:
    keys = parse_keys("k1:secret-one")
    legacy = hmac.new(b"secret-one", b"run-1\n3\n" + b'{"a":1}', hashlib.sha256).hexdigest()
    verify(keys, CHAIN, '{"a":1}', legacy, "k1", seal_format=1)
    with pytest.raises(SealInvalid):
        verify(keys, CHAIN, '{"a":1}', legacy, "k1", seal_format=2)


def test_the_first_key_signs_and_every_key_verifies() -> None:
    old = parse_keys("old:s1")
    rotated = parse_keys("new:s2,old:s1")
    mac, key_id = seal(old, CHAIN, '{"a":1}')
    verify(rotated, CHAIN, '{"a":1}', mac, key_id)
    assert seal(rotated, CHAIN, '{"a":1}')[1] == "new"
    with pytest.raises(SealInvalid, match="unknown key id"):
        verify(parse_keys("other:s3"), CHAIN, '{"a":1}', mac, key_id)


def test_a_loss_count_reset_below_the_sealed_one_or_grown_past_the_takes_is_refused() -> None:
    check_counters("r", attempt=3, losses=2, sealed_attempt=1, sealed_losses=1)  # one take lost, one not
    with pytest.raises(SealInvalid, match="reset"):
        check_counters("r", attempt=3, losses=0, sealed_attempt=2, sealed_losses=1)
    with pytest.raises(SealInvalid, match="grew"):
        check_counters("r", attempt=3, losses=4, sealed_attempt=2, sealed_losses=1)
    with pytest.raises(SealInvalid, match="not above"):
        check_counters("r", attempt=2, losses=1, sealed_attempt=2, sealed_losses=1)


def test_the_key_probe_verifies_only_with_the_cluster_key() -> None:
    cluster = parse_keys("k1:secret-one")
    key_id, made = probe(cluster)
    check_probe(parse_keys("k2:secret-two,k1:secret-one"), key_id, made)  # a rotation's first roll
    with pytest.raises(ConfigError, match="TICKETIQ_SEAL_KEYS"):
        check_probe(parse_keys("k9:whatever"), key_id, made)  # another host's generated key
    with pytest.raises(ConfigError, match="another secret"):
        check_probe(parse_keys("k1:not-the-secret"), key_id, made)


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
    assert [p.name for p in tmp_path.iterdir()] == ["seal.key"]  # no temporary file left behind
    os.chmod(tmp_path / "seal.key", 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_keys(settings)


def test_processes_racing_to_generate_the_key_all_read_the_same_whole_key(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    start = threading.Barrier(8)
    found: list[str] = []

    def load() -> None:
        start.wait()
        keys = load_keys(settings)
        found.append(f"{keys.signing_id}:{keys.secrets[keys.signing_id].decode()}")

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1 and len(found) == 8
    assert (tmp_path / "seal.key").read_text() == found[0]


@given(json_values)
def test_the_seal_is_hmac_sha256_over_the_chain_and_text_whether_given_text_or_bytes(state: object) -> None:
    keys = parse_keys("k1:secret-one")
    body = canonical(state)
    expected = hmac.new(b"secret-one", b"v2\nrun-1\n3\n2\n1\nabc\n" + body, hashlib.sha256).hexdigest()
    assert seal(keys, CHAIN, body) == (expected, "k1")
    assert seal(keys, CHAIN, body.decode()) == (expected, "k1")


def test_an_empty_key_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "seal.key").write_text("")
    os.chmod(tmp_path / "seal.key", 0o600)
    with pytest.raises(ConfigError, match="is empty; delete it"):
        load_keys(Settings(home=tmp_path))


def test_a_kept_answer_verifies_only_with_its_own_run_and_text() -> None:
    from ticketiq.engine.seal import seal_answer, verify_answer

    keys = parse_keys("k1:secret-one,k0:old")
    mac, key_id = seal_answer(keys, "run-1", "the answer")
    assert mac == hmac.new(b"secret-one", b"answer\nrun-1\nthe answer", hashlib.sha256).hexdigest()
    verify_answer(keys, "run-1", "the answer", mac, key_id)
    for run_id, text, kid in [("run-2", "the answer", key_id), ("run-1", "the answer!", key_id),
                              ("run-1", "the answer", "k0"), ("run-1", "the answer", "nope")]:  # fmt: skip
        with pytest.raises(SealInvalid):
            verify_answer(keys, run_id, text, mac, kid)
