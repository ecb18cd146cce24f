"""The stand-in Microsoft identity platform and the Bot Connector and Graph behind it, over raw HTTP:
the client-credentials grant in its real shape, OAuth errors for bad credentials, tokens that expire,
and the connector and Graph refusing (401, nothing applied) any token but a live one for their scope."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.http import TLS
from tests.support.standins import Standins, serve_standins
from ticketiq.standins.app import StandinOptions
from ticketiq.standins.vendors.botframework import APP_ID, APP_PASSWORD, CONNECTOR_SCOPE, GRAPH_SCOPE, KID

TOKEN_PATH = "/login/botframework.com/oauth2/v2.0/token"
THREAD = "19:ops@thread.tacv2;messageid=1700000000000"
REPLY_PATH = "/teams/v3/conversations/19%3Aops%40thread.tacv2%3Bmessageid%3D1700000000000/activities/1700000000000"
REPLIES_PATH = "/graph/v1.0/teams/standin-team/channels/19:ops@thread.tacv2/messages/1700000000000/replies"
CARD = {
    "type": "message",
    "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": {"type": "AdaptiveCard"}}],
}


def form(**changes: str | None) -> dict[str, str]:
    base: dict[str, str | None] = {
        "grant_type": "client_credentials",
        "client_id": APP_ID,
        "client_secret": APP_PASSWORD,
        "scope": CONNECTOR_SCOPE,
        **changes,
    }
    return {k: v for k, v in base.items() if v is not None}


async def buy(standins: Standins, **changes: str | None) -> httpx.Response:
    return await standins.admin.post(TOKEN_PATH, data=form(**changes))


async def bearer(standins: Standins, scope: str = CONNECTOR_SCOPE) -> dict[str, str]:
    response = await buy(standins, scope=scope)
    assert response.status_code == 200, response.text
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


async def test_the_grant_answers_in_the_identity_platforms_shape(db_url: str) -> None:
    async with serve_standins(db_url, options=StandinOptions(oauth_token_lifetime_s=1800)) as standins:
        response = await buy(standins)
        grants = await standins.token_grants()
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"token_type", "expires_in", "ext_expires_in", "access_token"}
    assert (body["token_type"], body["expires_in"], body["ext_expires_in"]) == ("Bearer", 1800, 1800)
    assert isinstance(body["access_token"], str) and len(body["access_token"]) > 20
    [granted] = grants
    assert (granted["tenant"], granted["client_id"], granted["scope"], granted["status"]) == (
        "botframework.com", APP_ID, CONNECTOR_SCOPE, 200,
    )  # fmt: skip
    assert granted["access_token"] == body["access_token"] and granted["expires_at"] is not None
    assert APP_PASSWORD not in str(grants)  # the secret is never kept


@pytest.mark.parametrize(
    ("changes", "status", "error", "code"),
    [
        ({"client_secret": "not-the-password"}, 401, "invalid_client", 7000215),
        ({"client_secret": None}, 401, "invalid_client", 7000218),
        ({"client_id": "another-app"}, 400, "unauthorized_client", 700016),
        ({"grant_type": "password"}, 400, "unsupported_grant_type", 70003),
        ({"scope": None}, 400, "invalid_request", 900144),
        ({"scope": "https://api.botframework.com"}, 400, "invalid_scope", 1002012),
        ({"scope": "https://vault.azure.net/.default"}, 400, "invalid_resource", 500011),
    ],
)
async def test_bad_credentials_get_an_oauth_error_and_no_token(
    standins: Standins, changes: dict[str, str | None], status: int, error: str, code: int
) -> None:
    response = await buy(standins, **changes)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error and body["error_codes"] == [code]
    assert body["error_description"].startswith(f"AADSTS{code}: ")
    assert "access_token" not in body
    [refused] = await standins.token_grants()
    assert (refused["status"], refused["error"], refused["access_token"]) == (status, error, None)


async def test_a_json_body_is_not_a_token_request(standins: Standins) -> None:
    response = await standins.admin.post(TOKEN_PATH, json=form())
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"


async def test_the_connector_and_graph_take_only_a_live_token_for_their_scope(standins: Standins) -> None:
    connector, graph = await bearer(standins, CONNECTOR_SCOPE), await bearer(standins, GRAPH_SCOPE)
    async with httpx.AsyncClient(verify=TLS, base_url=standins.base_url, timeout=30) as c:
        refused: dict[str, dict[str, str]] = {
            "missing": {},
            "not bearer": {"Authorization": connector["Authorization"].replace("Bearer", "Basic")},
            "unknown": {"Authorization": "Bearer standin.never-granted"},
            "for the other scope": graph,
        }
        for why, headers in refused.items():
            posted = await c.post(REPLY_PATH, json=CARD, headers=headers)
            assert posted.status_code == 401, (why, posted.text)
            assert posted.json()["error"]["code"] == "Unauthorized", why
            assert posted.headers["WWW-Authenticate"].startswith('Bearer error="invalid_token"'), why
        for why, headers in {**refused, "for the other scope": connector}.items():
            read = await c.get(REPLIES_PATH, headers=headers)
            assert read.status_code == 401, (why, read.text)
            assert read.json()["error"]["code"] == "InvalidAuthenticationToken", why
        assert (await c.post(REPLY_PATH, json=CARD, headers=connector)).status_code == 201
        assert (await c.get(REPLIES_PATH, headers=graph)).status_code == 200
        # The tokens run out (a test's "an hour passes"): both services refuse them from now on.
        assert await standins.expire_tokens() == 2
        expired_reply = await c.post(REPLY_PATH, json=CARD, headers=connector)
        expired_read = await c.get(REPLIES_PATH, headers=graph)
        assert (expired_reply.status_code, expired_read.status_code) == (401, 401)
        assert "expired" in expired_reply.headers["WWW-Authenticate"]
        assert (await c.post(REPLY_PATH, json=CARD, headers=await bearer(standins))).status_code == 201
    writes = await standins.writes(vendor="teams", target=THREAD)
    assert [w["effect"] for w in writes] == ["refused"] * 4 + ["applied", "refused", "applied"]
    assert [w["status"] for w in writes if w["effect"] == "refused"] == [401] * 5


async def test_the_signing_keys_carry_endorsements_unless_told_not_to(db_url: str) -> None:
    async def keys(options: StandinOptions | None) -> list[dict[str, Any]]:
        async with serve_standins(db_url, options=options) as standins:
            response = await standins.admin.get("/_standin/botframework/jwks")
            response.raise_for_status()
            found: list[dict[str, Any]] = response.json()["keys"]
            return found

    [default] = await keys(None)
    assert default["kid"] == KID and "msteams" in default["endorsements"]
    [skype_only] = await keys(StandinOptions(botframework_endorsements=["skype"]))
    assert skype_only["endorsements"] == ["skype"]
    [bare] = await keys(StandinOptions(botframework_endorsements=None))
    assert "endorsements" not in bare and bare["kid"] == KID
