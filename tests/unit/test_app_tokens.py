"""The bot's own tokens (tools/app_tokens.py): when a token is still used, and what a token endpoint's
answer grants or why it grants nothing, with the setting to fix named and no secret repeated."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.tools.app_tokens import (
    REFRESH_MARGIN_S,
    AccessToken,
    Grant,
    Granted,
    Refused,
    answered,
    fresh,
    refresh_margin_s,
)

SECRET = "pa55-w0rd-of-the-bot"
GRANT = Grant(
    token_url="https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token",
    client_id="bot-app-id",
    scope="https://api.botframework.com/.default",
    url_setting="TICKETIQ_TEAMS_TOKEN_URL",
    id_setting="TICKETIQ_TEAMS_APP_ID",
    secret_setting="TICKETIQ_TEAMS_APP_PASSWORD",
    scope_setting="TICKETIQ_TEAMS_TOKEN_SCOPE",
    client_secret=SECRET,
)
TOKEN_TEXT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.the-token"


def test_an_hour_long_token_is_used_until_five_minutes_before_it_runs_out() -> None:
    token = AccessToken(TOKEN_TEXT, 3599.0, bought_at=1000.0)
    assert fresh(token, 1000.0)
    assert fresh(token, 1000.0 + 3599.0 - REFRESH_MARGIN_S - 0.001)
    assert not fresh(token, 1000.0 + 3599.0 - REFRESH_MARGIN_S)
    assert not fresh(token, 1000.0 + 3599.0)


def test_a_short_token_is_used_for_half_its_life() -> None:
    token = AccessToken(TOKEN_TEXT, 4.0, bought_at=0.0)
    assert refresh_margin_s(4.0) == 2.0
    assert fresh(token, 1.999) and not fresh(token, 2.0)


@given(  # whole seconds: sums of them are exact, so the rule is tested, not the float rounding
    lasts=st.integers(min_value=1, max_value=86400),
    bought_at=st.integers(min_value=0, max_value=10**6),
    later=st.integers(min_value=0, max_value=2 * 10**5),
)
def test_a_token_is_never_used_past_its_expiry_nor_dropped_before_half_its_life(
    lasts: int, bought_at: int, later: int
) -> None:
    is_fresh = fresh(AccessToken(TOKEN_TEXT, lasts, bought_at), bought_at + later)
    if later >= lasts:
        assert not is_fresh
    if later < lasts / 2 and later < lasts - REFRESH_MARGIN_S:
        assert is_fresh
    assert is_fresh == (later < lasts - min(REFRESH_MARGIN_S, lasts / 2))


def test_a_granted_token_is_taken_in_the_endpoints_shape() -> None:
    body = {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": TOKEN_TEXT}
    assert answered(200, body, GRANT) == Granted(TOKEN_TEXT, 3599.0)
    # The v1 endpoint (and some proxies) send expires_in as a string; the type's case does not matter.
    assert answered(200, {**body, "expires_in": "3599", "token_type": "bearer"}, GRANT) == Granted(TOKEN_TEXT, 3599.0)


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"token_type": "Bearer", "expires_in": 3599}, "no access_token"),
        ({"token_type": "Bearer", "expires_in": 3599, "access_token": ""}, "no access_token"),
        ({"token_type": "pop", "expires_in": 3599, "access_token": TOKEN_TEXT}, "not Bearer"),
        ({"token_type": "Bearer", "access_token": TOKEN_TEXT}, "expires_in"),
        ({"token_type": "Bearer", "expires_in": 0, "access_token": TOKEN_TEXT}, "expires_in"),
        ({"token_type": "Bearer", "expires_in": True, "access_token": TOKEN_TEXT}, "expires_in"),
        ("<html>sign in</html>", "TICKETIQ_TEAMS_TOKEN_URL"),
    ],
)
def test_a_2xx_without_a_usable_token_grants_nothing(body: Any, said: str) -> None:
    refused = answered(200, body, GRANT)
    assert isinstance(refused, Refused) and not refused.retryable
    assert said in refused.reason and TOKEN_TEXT not in refused.reason


@pytest.mark.parametrize(
    ("status", "error", "fix"),
    [
        (401, "invalid_client", "check TICKETIQ_TEAMS_APP_PASSWORD (and TICKETIQ_TEAMS_APP_ID)"),
        (400, "unauthorized_client", "check TICKETIQ_TEAMS_APP_ID"),
        (400, "invalid_scope", "check TICKETIQ_TEAMS_TOKEN_SCOPE"),
        (400, "invalid_request", "check TICKETIQ_TEAMS_TOKEN_URL"),
    ],
)
def test_an_oauth_error_names_the_setting_to_fix_and_is_not_tried_again(status: int, error: str, fix: str) -> None:
    body = {"error": error, "error_description": "AADSTS7000215: Invalid client secret provided.", "error_codes": [1]}
    refused = answered(status, body, GRANT)
    assert isinstance(refused, Refused) and not refused.retryable
    assert fix in refused.reason
    assert f"{status} {error}: AADSTS7000215" in refused.reason


@pytest.mark.parametrize("status", [429, 500, 503])
def test_a_throttled_or_failing_endpoint_may_grant_on_another_try(status: int) -> None:
    refused = answered(status, {"error": "temporarily_unavailable"}, GRANT)
    assert isinstance(refused, Refused) and refused.retryable


def test_a_secret_the_endpoint_echoes_is_never_repeated() -> None:
    body = {"error": "invalid_client", "error_description": f"client_secret={SECRET} is wrong"}
    refused = answered(401, body, GRANT)
    assert isinstance(refused, Refused)
    assert SECRET not in refused.reason and "***" in refused.reason
    echoed = answered(502, f"upstream said client_secret={SECRET}", GRANT)
    assert isinstance(echoed, Refused) and SECRET not in echoed.reason


def test_no_repr_shows_a_token_or_the_secret() -> None:
    shown = repr(GRANT) + repr(AccessToken(TOKEN_TEXT, 3599.0, 0.0)) + repr(Granted(TOKEN_TEXT, 3599.0))
    assert SECRET not in shown and TOKEN_TEXT not in shown
