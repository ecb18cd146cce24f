"""Webhook signatures, the replay window, and how a trigger's secrets are kept: pure, no database."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.auth.webhook_signature import (
    TOLERANCE_S,
    Verdict,
    check_delivery,
    check_hub,
    header_for,
    parse,
    sign,
)
from ticketiq.engine.seal import parse_keys
from ticketiq.errors import RequestError
from ticketiq.intake import webhook_triggers
from ticketiq.intake.idempotency import key_problem
from ticketiq.storage.trigger_store import SecretState

NOW = 1_700_000_000
OLD, NEW = b"old-secret-0123456789", b"new-secret-0123456789"
BODY = b'{"ticket": "OPS-12", "text": "checkout fails"}'


def signed(secret: bytes, body: bytes = BODY, at: int = NOW) -> str:
    mac = hmac.new(secret, f"{at}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={at},v1={mac}"


def test_a_delivery_signed_with_an_active_secret_is_accepted_and_says_which() -> None:
    assert check_delivery(signed(OLD), BODY, [OLD], NOW).accepted
    # During a rotation both secrets are active: either one passes.
    assert check_delivery(signed(OLD), BODY, [OLD, NEW], NOW).secret == 0
    assert check_delivery(signed(NEW), BODY, [OLD, NEW], NOW).secret == 1


def test_a_retired_secret_or_another_body_does_not_verify() -> None:
    assert check_delivery(signed(OLD), BODY, [NEW], NOW).verdict is Verdict.MISMATCH
    assert check_delivery(signed(OLD), BODY + b" ", [OLD], NOW).verdict is Verdict.MISMATCH
    # The raw body is what is signed: the same JSON re-serialized is another body.
    reserialized = json.dumps(json.loads(BODY), separators=(",", ":")).encode()
    assert reserialized != BODY
    assert check_delivery(signed(OLD), reserialized, [OLD], NOW).verdict is Verdict.MISMATCH
    # The timestamp is signed with the body: another timestamp with the same MAC fails.
    mac = signed(OLD).split("v1=")[1]
    assert check_delivery(f"t={NOW + 1},v1={mac}", BODY, [OLD], NOW).verdict is Verdict.MISMATCH


def test_an_unknown_trigger_is_refused_exactly_like_a_wrong_secret() -> None:
    unknown = check_delivery(signed(OLD), BODY, [], NOW)
    wrong = check_delivery(signed(OLD), BODY, [NEW], NOW)
    assert unknown == wrong and unknown.verdict is Verdict.MISMATCH


@pytest.mark.parametrize(
    ("skew", "verdict"),
    [(0, Verdict.ACCEPTED), (-TOLERANCE_S, Verdict.ACCEPTED), (TOLERANCE_S, Verdict.ACCEPTED),
     (-TOLERANCE_S - 1, Verdict.STALE), (TOLERANCE_S + 1, Verdict.STALE), (-86400, Verdict.STALE),
     (86400, Verdict.STALE)],
)  # fmt: skip
def test_a_timestamp_more_than_five_minutes_from_now_either_way_is_refused(skew: float, verdict: Verdict) -> None:
    at = NOW + int(skew)
    check = check_delivery(signed(OLD, at=at), BODY, [OLD], NOW)
    assert check.verdict is verdict, check
    if verdict is Verdict.STALE:
        assert ("old" if skew < 0 else "in the future") in check.reason


@pytest.mark.parametrize(
    ("header", "verdict"),
    [
        (None, Verdict.MISSING),
        ("", Verdict.MISSING),
        ("   ", Verdict.MISSING),
        ("garbage", Verdict.MALFORMED),
        (f"v1={'a' * 64}", Verdict.MALFORMED),  # no timestamp
        (f"t={NOW},t={NOW},v1={'a' * 64}", Verdict.MALFORMED),  # two
        (f"t=-{NOW},v1={'a' * 64}", Verdict.MALFORMED),
        (f"t={NOW}.5,v1={'a' * 64}", Verdict.MALFORMED),
        (f"t={NOW}", Verdict.MALFORMED),  # no v1
        (f"t={NOW},v1=xyz", Verdict.MALFORMED),
        (f"t={NOW},v1={'a' * 63}", Verdict.MALFORMED),
        (f"t={NOW}," + ",".join(f"v1={'a' * 64}" for _ in range(9)), Verdict.MALFORMED),
    ],
)
def test_a_missing_or_malformed_signature_header_is_refused_saying_what_is_expected(
    header: str | None, verdict: Verdict
) -> None:
    check = check_delivery(header, BODY, [OLD], NOW)
    assert check.verdict is verdict
    assert "t=<unix seconds>,v1=<hex>" in check.reason


def test_several_v1_values_pass_when_one_is_made_by_an_active_secret_and_other_schemes_are_ignored() -> None:
    good = signed(NEW).split("v1=")[1]
    assert check_delivery(f"t={NOW},v0=zz,v1={'0' * 64},v1={good.upper()}", BODY, [NEW], NOW).accepted
    assert parse(f"t={NOW}, v1={good}") == parse(f"t={NOW},v1={good}")


def test_the_header_a_sender_builds_is_the_one_checked() -> None:
    header = header_for([OLD, NEW], NOW, BODY)
    assert header.count("v1=") == 2
    assert check_delivery(header, BODY, [NEW], NOW).accepted
    assert sign(OLD, str(NOW), BODY) == signed(OLD).split("v1=")[1]


@given(body=st.binary(max_size=300), secret=st.binary(min_size=1, max_size=64), skew=st.integers(-300, 300),
       flip=st.integers(min_value=0))  # fmt: skip
def test_any_body_signed_within_the_window_verifies_and_any_one_byte_changed_does_not(
    body: bytes, secret: bytes, skew: int, flip: int
) -> None:
    header = header_for([secret], NOW + skew, body)
    assert check_delivery(header, body, [secret], NOW).accepted
    if body:
        i = flip % len(body)
        changed = body[:i] + bytes([body[i] ^ 0x01]) + body[i + 1 :]
        assert check_delivery(header, changed, [secret], NOW).verdict is Verdict.MISMATCH


# ----- Jira's X-Hub-Signature ----------------------------------------------------------------------


def hub(secret: bytes, body: bytes = BODY) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def test_a_jira_event_signed_with_the_configured_secret_is_accepted() -> None:
    assert check_hub(hub(OLD), BODY, OLD).accepted
    assert check_hub(hub(OLD).upper().replace("SHA256=", "sha256="), BODY, OLD).accepted


@pytest.mark.parametrize(
    ("header", "verdict"),
    [(None, Verdict.MISSING), ("", Verdict.MISSING), (hub(NEW), Verdict.MISMATCH),
     ("sha1=" + "a" * 40, Verdict.MALFORMED), ("sha256=xyz", Verdict.MALFORMED), ("a" * 64, Verdict.MALFORMED)],
)  # fmt: skip
def test_a_jira_event_without_a_good_signature_is_refused(header: str | None, verdict: Verdict) -> None:
    assert check_hub(header, BODY, OLD).verdict is verdict
    assert check_hub(hub(OLD), BODY + b"x", OLD).verdict is Verdict.MISMATCH


def test_without_a_configured_secret_every_jira_event_is_refused_naming_the_setting() -> None:
    check = check_hub(hub(OLD), BODY, None)
    assert not check.accepted and "TICKETIQ_JIRA_WEBHOOK_SECRET is unset" in check.reason


# ----- a trigger's secrets, names and keys ----------------------------------------------------------

KEYS = parse_keys("k2:second-seal-secret,k1:first-seal-secret")


def test_a_secret_is_kept_encrypted_and_opens_only_for_its_trigger_under_a_listed_key() -> None:
    sealed = webhook_triggers.seal_secret(KEYS, "deploys", "s3cret-s3cret-s3cret")
    assert sealed.key_id == "k2" and b"s3cret" not in sealed.ciphertext and "s3cret" not in repr(sealed)
    assert webhook_triggers.open_secret(KEYS, "deploys", sealed) == b"s3cret-s3cret-s3cret"
    assert webhook_triggers.open_secret(KEYS, "other", sealed) is None  # moved to another trigger
    tampered = type(sealed)(sealed.key_id, sealed.nonce, bytes([sealed.ciphertext[0] ^ 1]) + sealed.ciphertext[1:])
    assert webhook_triggers.open_secret(KEYS, "deploys", tampered) is None
    # A seal key rotated in signs; the older one still opens what it encrypted, until it is dropped.
    rotated = parse_keys("k3:third-seal-secret,k2:second-seal-secret")
    assert webhook_triggers.open_secret(rotated, "deploys", sealed) == b"s3cret-s3cret-s3cret"
    assert webhook_triggers.open_secret(parse_keys("k3:third-seal-secret"), "deploys", sealed) is None
    # Two encryptions of one secret differ (a fresh nonce each).
    assert webhook_triggers.seal_secret(KEYS, "deploys", "s3cret-s3cret-s3cret").nonce != sealed.nonce


def test_the_fingerprint_binding_an_idempotency_key_is_keyed_by_the_seal_key() -> None:
    one = webhook_triggers.fingerprint(KEYS, "s3cret-s3cret-s3cret")
    assert one == webhook_triggers.fingerprint(KEYS, "s3cret-s3cret-s3cret")
    assert one != webhook_triggers.fingerprint(KEYS, "s3cret-s3cret-s3creT")
    assert one != hashlib.sha256(b"s3cret-s3cret-s3cret").hexdigest()
    assert one != webhook_triggers.fingerprint(parse_keys("k9:another"), "s3cret-s3cret-s3cret")


@pytest.mark.parametrize("secret", ["short", "x" * 513, "has a space in it ok", "tab\tseparated-secret", "é" * 20])
def test_a_weak_or_odd_secret_is_refused_without_being_quoted(secret: str) -> None:
    with pytest.raises(RequestError) as refused:
        webhook_triggers.checked_secret(secret)
    assert refused.value.field == "body.secret" and secret not in refused.value.message


def test_a_delivery_run_key_cannot_be_made_through_the_api_and_names_its_parts() -> None:
    key = webhook_triggers.run_key("deploys", "d-1")
    assert key == "webhook\tdeploys\td-1"
    assert key_problem(key) is not None  # no API Idempotency-Key can squat it
    assert webhook_triggers.run_key("a", "b c") != webhook_triggers.run_key("a b", "c")
    assert webhook_triggers.actor("deploys") == "trigger:deploys"


@pytest.mark.parametrize(
    ("delivery_id", "ok"), [("d-1", True), ("x" * 255, True), (None, False), ("", False), ("x" * 256, False),
                            ("tab\there", False), ("é", False)],
)  # fmt: skip
def test_a_delivery_id_is_one_to_255_printable_ascii_characters(delivery_id: str | None, ok: bool) -> None:
    assert (webhook_triggers.delivery_id_problem(delivery_id) is None) is ok


@pytest.mark.parametrize(("name", "ok"), [("deploys", True), ("a.b-c_d@e", True), ("", False), ("a b", False),
                                          ("trigger:x", False), ("-x", False), ("x" * 101, False)])  # fmt: skip
def test_trigger_names_are_like_token_names(name: str, ok: bool) -> None:
    if ok:
        assert webhook_triggers.checked_name(name) == name
    else:
        with pytest.raises(RequestError):
            webhook_triggers.checked_name(name)


AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_third_active_secret_is_refused_until_one_is_retired_or_expired() -> None:
    one = [SecretState(1, True, None, None)]
    two = [*one, SecretState(2, True, None, None)]
    assert webhook_triggers.add_refusal(one) is None
    refused = webhook_triggers.add_refusal(two)
    assert refused is not None and refused.status == 409 and "1, 2 are active" in refused.message
    assert webhook_triggers.add_refusal([SecretState(1, False, AT, None), *two[1:]]) is None


def test_retiring_needs_an_active_secret_that_is_not_the_last() -> None:
    secrets = [SecretState(1, True, None, None), SecretState(2, True, None, None), SecretState(3, False, AT, None),
               SecretState(4, False, None, AT)]  # fmt: skip
    assert webhook_triggers.retire_refusal(secrets, 1) is None
    for n, status, words in [(9, 404, "no secret 9"), (3, 409, "retired already"), (4, 409, "expired already")]:
        refused = webhook_triggers.retire_refusal(secrets, n)
        assert refused is not None and refused.status == status and words in refused.message
    last = webhook_triggers.retire_refusal(secrets[1:], 2)
    assert last is not None and last.status == 409 and "only active one" in last.message
