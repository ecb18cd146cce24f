"""The app's own tokens for a scope: the OAuth 2.0 client-credentials grant (RFC 6749, 4.4), as the
Microsoft identity platform gives a bot its tokens for the Bot Connector and for Graph.

A token is bought with a form POST (`grant_type=client_credentials`, `client_id`, `client_secret`,
`scope`) to a token URL and lasts the `expires_in` seconds it is granted for (about an hour). One token
per (token URL, client id, scope) is kept and used until a margin before it runs out (`REFRESH_MARGIN_S`,
or half its life when that is shorter), then bought again; callers that find it stale together share
one purchase. A vendor that answers 401 refused the token without applying anything: the caller drops
it (`AppTokens.drop`), buys a fresh one and sends once more.

Tokens are kept per HTTP client (`of`): each process, and each engine a test makes, sends through its
own client, so its tokens live and die with it and never cross to another one's vendors.

Neither a token nor the secret is logged, shown in a repr or put in an error: a refusal quotes the
token endpoint's `error` and `error_description` and names the setting to fix.

The decisions (is a token still good at time t; what an answer grants, or why not) are pure functions
over plain data; `AppTokens` is the thin driver that buys, keeps and shares tokens.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import httpx

from ticketiq.tools.base import Outcome
from ticketiq.tools.http import VendorFailed
from ticketiq.values.json_depth import too_deep

log = logging.getLogger(__name__)

# Used up to this long before it runs out (MSAL's margin), or half its life when that is shorter.
REFRESH_MARGIN_S = 300.0
_DESCRIPTION_MAX = 400


@dataclass(frozen=True)
class Grant:
    """What the token endpoint is asked for, with the settings that say it (named when it is refused)."""

    token_url: str
    client_id: str
    scope: str
    url_setting: str
    id_setting: str
    secret_setting: str
    scope_setting: str
    client_secret: str = field(repr=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.token_url, self.client_id, self.scope


@dataclass(frozen=True)
class AccessToken:
    value: str = field(repr=False)
    expires_in_s: float
    bought_at: float  # monotonic, read before the request went out: the token lasts at least this long


@dataclass(frozen=True)
class Granted:
    value: str = field(repr=False)
    expires_in_s: float


@dataclass(frozen=True)
class Refused:
    reason: str
    retryable: bool  # a 429, a 5xx or no answer: the endpoint may grant it on another try


def refresh_margin_s(expires_in_s: float) -> float:
    return min(REFRESH_MARGIN_S, expires_in_s / 2)


def fresh(token: AccessToken, now: float) -> bool:
    """Whether `token` is still used at monotonic time `now`, or bought again first."""
    return now < token.bought_at + token.expires_in_s - refresh_margin_s(token.expires_in_s)


def answered(status: int, body: Any, grant: Grant) -> Granted | Refused:
    """What the token endpoint's answer grants, or why it grants nothing (naming the setting to fix)."""
    if 200 <= status < 300:
        return _granted(body, grant)
    error, description = _oauth_error(body)
    said = f"{status} {error}" + (f": {description}" if description else "")
    said = said.replace(grant.client_secret, "***") if grant.client_secret else said
    where = f"the token endpoint ({grant.url_setting})"
    if status == 429 or status >= 500:
        return Refused(f"{where} failed ({said})", retryable=True)
    if error == "invalid_client":
        fix = f"check {grant.secret_setting} (and {grant.id_setting})"
    elif error == "unauthorized_client":
        fix = f"check {grant.id_setting}"
    elif error == "invalid_scope":
        fix = f"check {grant.scope_setting}"
    else:
        fix = f"check {grant.url_setting}"
    return Refused(f"{where} refused the app's credentials ({said}): {fix}", retryable=False)


def _granted(body: Any, grant: Grant) -> Granted | Refused:
    where = f"the token endpoint ({grant.url_setting})"
    if not isinstance(body, dict):
        return Refused(f"{where} answered without a JSON object: check {grant.url_setting}", retryable=False)
    value = body.get("access_token")
    kind = body.get("token_type")
    lasts = body.get("expires_in")
    if isinstance(lasts, str) and lasts.isdigit():  # the v1 endpoint sends it as a string
        lasts = int(lasts)
    if not isinstance(value, str) or not value:
        return Refused(f"{where} granted no access_token", retryable=False)
    if not isinstance(kind, str) or kind.lower() != "bearer":
        return Refused(f"{where} granted a token of type {kind!r}, not Bearer", retryable=False)
    if not isinstance(lasts, int | float) or isinstance(lasts, bool) or lasts <= 0:
        return Refused(f"{where} granted a token without a usable expires_in ({lasts!r})", retryable=False)
    return Granted(value, float(lasts))


def _oauth_error(body: Any) -> tuple[str, str]:
    """The OAuth error code and description (RFC 6749, 5.2), or what there is of a body of another shape."""
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        description = body.get("error_description")
        text = description.strip() if isinstance(description, str) else ""
        return body["error"], text[:_DESCRIPTION_MAX]
    return "", str(body or "no details").strip()[:_DESCRIPTION_MAX]


# ----- the driver -----------------------------------------------------------------------------------------


class AppTokens:
    """The tokens one HTTP client's requests carry: kept until stale, bought once however many wait."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str, str], AccessToken] = {}
        self._buying: dict[tuple[str, str, str], asyncio.Future[AccessToken]] = {}

    async def token(self, grant: Grant, http: httpx.AsyncClient, timeout_s: float, retries: int) -> str:
        """A token for `grant`'s scope; VendorFailed (not sent, so not in doubt) when none is granted."""
        held = self._held.get(grant.key)
        if held is not None and fresh(held, time.monotonic()):
            return held.value
        buying = self._buying.get(grant.key)
        if buying is None:
            buying = asyncio.ensure_future(self._buy(grant, http, timeout_s, retries))
            self._buying[grant.key] = buying
            buying.add_done_callback(lambda done: self._bought(grant.key, done))
        # Shielded: a caller that gives up does not stop the purchase the others wait for.
        return (await asyncio.shield(buying)).value

    def drop(self, grant: Grant, value: str) -> None:
        """Forget the token a vendor refused, unless a fresher one already took its place."""
        held = self._held.get(grant.key)
        if held is not None and held.value == value:
            del self._held[grant.key]

    def _bought(self, key: tuple[str, str, str], done: asyncio.Future[AccessToken]) -> None:
        if self._buying.get(key) is done:
            del self._buying[key]
        if not done.cancelled() and done.exception() is None:  # a failure is retrieved here, and raised to the callers
            self._held[key] = done.result()

    async def _buy(self, grant: Grant, http: httpx.AsyncClient, timeout_s: float, retries: int) -> AccessToken:
        form = {
            "grant_type": "client_credentials",
            "client_id": grant.client_id,
            "client_secret": grant.client_secret,
            "scope": grant.scope,
        }
        tries = 0
        while True:
            bought_at = time.monotonic()
            try:
                response = await http.post(
                    grant.token_url, data=form, headers={"Accept": "application/json"}, timeout=timeout_s
                )
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                answer: Granted | Refused = Refused(
                    f"the token endpoint ({grant.url_setting}) could not be reached ({type(exc).__name__})",
                    retryable=True,
                )
            else:
                answer = answered(response.status_code, _body(response), grant)
            if isinstance(answer, Granted):
                log.debug("bought a token for %s; it lasts %.0f s", grant.scope, answer.expires_in_s)
                return AccessToken(answer.value, answer.expires_in_s, bought_at)
            if not answer.retryable or tries >= retries:
                log.warning("no token for %s: %s", grant.scope, answer.reason)
                raise VendorFailed(Outcome(ok=False, error=f"no token for the request: {answer.reason}"))
            tries += 1
            await asyncio.sleep(min(0.2 * 2.0 ** (tries - 1), 2.0) * (0.5 + random.random() / 2))


def _body(response: httpx.Response) -> Any:
    if too_deep(response.content):
        return response.text  # I16: no answer of the token endpoint nests like that; never parsed
    try:
        return response.json()
    except ValueError:
        return response.text


_BY_CLIENT: weakref.WeakKeyDictionary[httpx.AsyncClient, AppTokens] = weakref.WeakKeyDictionary()


def of(http: httpx.AsyncClient) -> AppTokens:
    """The tokens kept for `http`'s requests (made on first use; gone with the client)."""
    found = _BY_CLIENT.get(http)
    if found is None:
        found = _BY_CLIENT[http] = AppTokens()
    return found
