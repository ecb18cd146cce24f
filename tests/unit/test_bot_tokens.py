"""Bot Framework tokens: what a token whose signature verified must still say (auth/bot_tokens.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.auth.bot_tokens import (
    LEEWAY_S,
    Expected,
    endorsement_refusal,
    endorsements,
    service_url_refusal,
    token_refusal,
)

EXPECTED = Expected(issuer="https://api.botframework.com", audience="bot-app-id")
NOW = 1_700_000_000.0


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": "https://api.botframework.com",
        "aud": "bot-app-id",
        "serviceurl": "https://smba.trafficmanager.net/amer/",
        "nbf": NOW - 60,
        "exp": NOW + 3600,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def test_a_token_the_bot_framework_would_send_is_accepted() -> None:
    assert token_refusal(claims(), EXPECTED, NOW) is None
    assert token_refusal(claims(aud=["other", "bot-app-id"]), EXPECTED, NOW) is None  # aud may be a list
    assert token_refusal(claims(nbf=None), EXPECTED, NOW) is None  # nbf is optional


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"iss": "https://evil.example"}, "issuer"),
        ({"iss": None}, "issuer"),
        ({"aud": "another-bot"}, "audience"),
        ({"aud": ["a", "b"]}, "audience"),
        ({"aud": None}, "audience"),
        ({"exp": None}, "no expiry"),
        ({"exp": "tomorrow"}, "no expiry"),
        ({"exp": True}, "no expiry"),
        ({"exp": NOW - LEEWAY_S - 1}, "expired"),
        ({"nbf": NOW + LEEWAY_S + 1}, "not valid for another"),
        ({"nbf": "soon"}, "nbf"),
        ({"serviceurl": None}, "serviceurl"),
        ({"serviceurl": ""}, "serviceurl"),
    ],
)
def test_a_token_is_refused_with_the_reason(changes: dict[str, Any], said: str) -> None:
    why = token_refusal(claims(**changes), EXPECTED, NOW)
    assert why is not None and said in why


@given(exp_offset=st.floats(min_value=-10 * LEEWAY_S, max_value=10 * LEEWAY_S, allow_nan=False))
def test_expiry_is_judged_with_the_leeway_and_only_it(exp_offset: float) -> None:
    why = token_refusal(claims(exp=NOW + exp_offset, nbf=None), EXPECTED, NOW)
    assert (why is not None) == (exp_offset < -LEEWAY_S)


@given(nbf_offset=st.floats(min_value=-10 * LEEWAY_S, max_value=10 * LEEWAY_S, allow_nan=False))
def test_not_before_is_judged_with_the_leeway(nbf_offset: float) -> None:
    why = token_refusal(claims(nbf=NOW + nbf_offset), EXPECTED, NOW)
    assert (why is not None) == (nbf_offset > LEEWAY_S)


def test_the_activity_must_name_the_service_url_its_token_names() -> None:
    named = claims()
    assert service_url_refusal(named, "https://smba.trafficmanager.net/amer/") is None
    assert service_url_refusal(named, "https://smba.trafficmanager.net/amer") is None  # a trailing slash aside
    for other in (
        "https://smba.trafficmanager.net/emea/",
        "https://evil.example/amer/",
        "HTTPS://SMBA.trafficmanager.net/amer/",
    ):
        why = service_url_refusal(named, other)
        assert why is not None and "serviceUrl" in why
    assert service_url_refusal(claims(serviceurl=None), "https://smba.trafficmanager.net/amer/") is not None


# The shape of https://login.botframework.com/v1/.well-known/keys: each key lists the channels it signs for.
KEY_SET = {
    "keys": [
        {"kty": "RSA", "kid": "teams-key", "n": "...", "e": "AQAB", "endorsements": ["msteams", "skype"]},
        {"kty": "RSA", "kid": "webchat-key", "n": "...", "e": "AQAB", "endorsements": ["webchat"]},
        {"kty": "RSA", "kid": "bare-key", "n": "...", "e": "AQAB"},
        {"kty": "RSA", "kid": "empty-key", "n": "...", "e": "AQAB", "endorsements": []},
        {"kty": "RSA", "kid": "odd-key", "n": "...", "e": "AQAB", "endorsements": "msteams"},
        {"kty": "RSA", "n": "...", "e": "AQAB", "endorsements": ["msteams"]},  # no kid: no token names it
    ]
}


def test_the_key_sets_endorsements_are_read_per_key_and_a_key_without_the_field_is_left_out() -> None:
    assert endorsements(KEY_SET) == {
        "teams-key": ["msteams", "skype"],
        "webchat-key": ["webchat"],
        "empty-key": [],
        "odd-key": "msteams",
    }
    assert endorsements({"keys": "no"}) == endorsements([]) == endorsements({}) == {}


def test_a_key_endorsed_for_the_activitys_channel_is_accepted() -> None:
    endorsed = endorsements(KEY_SET)
    assert endorsement_refusal("teams-key", endorsed, "msteams") is None
    assert endorsement_refusal("webchat-key", endorsed, "webchat") is None


@pytest.mark.parametrize(
    ("kid", "said"),
    [
        ("webchat-key", "not endorsed for the channel 'msteams' (it is for: webchat)"),
        ("empty-key", "not endorsed for the channel 'msteams' (it is for: none)"),  # as the .NET and JS SDKs
        ("odd-key", "not a list of channels"),
    ],
)
def test_a_key_not_endorsed_for_the_activitys_channel_is_refused(kid: str, said: str) -> None:
    why = endorsement_refusal(kid, endorsements(KEY_SET), "msteams")
    assert why is not None and said in why and kid in why


def test_like_the_sdks_a_key_without_endorsements_or_an_activity_without_a_channel_is_not_checked() -> None:
    endorsed = endorsements(KEY_SET)
    assert endorsement_refusal("bare-key", endorsed, "msteams") is None
    assert endorsement_refusal("webchat-key", endorsed, None) is None
    assert endorsement_refusal("webchat-key", endorsed, "") is None
    assert endorsement_refusal(None, endorsed, "msteams") is None
