"""Bot Framework token service stand-in (under /_standin/botframework): the keys the Bot Framework signs
its tokens to a bot with, and a mint for such tokens, so tests and operators send real signed
activities to `POST /v1/teams/messages`; and the Microsoft identity platform's token endpoint (under
/login), which sells the bot its own tokens for the Bot Connector and Graph.

    GET  /_standin/botframework/jwks    {"keys": [JWK]}: the RS256 public key (with its `kid` and, as the
                                        real metadata's keys do, the channels it is `endorsements` for;
                                        option `botframework_endorsements`, None: no such field)
    POST /_standin/botframework/token   {audience, service_url, expires_in?, issuer?}
                                        -> {token_type, expires_in, access_token}
    POST /login/{tenant}/oauth2/v2.0/token   the client-credentials grant: a form body (`grant_type`,
                                        `client_id`, `client_secret`, `scope`) -> {token_type, expires_in,
                                        ext_expires_in, access_token}, or an OAuth error body {error,
                                        error_description, error_codes} (400; 401 invalid_client)
    GET  /_standin/botframework/oauth/grants   every token request (never its secret) and what it got
    POST /_standin/botframework/oauth/expire   every granted token runs out now -> {"expired": n}

A token the mint signs says what the Bot Framework's do: `iss` (https://api.botframework.com unless
`issuer` says otherwise), `aud` (the bot's app id), `serviceurl`, `nbf` and `exp` (`expires_in` seconds
from now, an hour by default; a negative value mints one that has expired). The RSA key pair is made on
first use and kept in `standin.botframework_keys`, so a restart of the stand-ins, or a second stand-in
process on the same database, signs with the same key.

The token endpoint knows one app, `APP_ID` with the password `APP_PASSWORD`, and the two scopes in
`SCOPES`. The tokens it grants are opaque and last the option `oauth_token_lifetime_s` (3599 s, as Entra
ID's) by the database clock; they are kept in `standin.token_grants`, where the connector and Graph
stand-ins look a bearer token up (`bearer_refusal`): missing, unknown, expired or for another scope, they
answer 401 as the real services do.
"""

from __future__ import annotations

import asyncio
import functools
import secrets
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.standins.records import CLIENT, Answer, Effect, Row, iso
from ticketiq.standins.vendors.intake import Intake, IntakeDep, respond

KID = "standin-botframework-1"
ISSUER = "https://api.botframework.com"
ALGORITHM = "RS256"
# The one app the token endpoint knows: the bot the stand-ins' activities are for.
APP_ID = "standin-bot"
APP_PASSWORD = "standin-bot-password"
CONNECTOR_SCOPE = "https://api.botframework.com/.default"
GRAPH_SCOPE = "https://graph.microsoft.com/.default"
SCOPES = (CONNECTOR_SCOPE, GRAPH_SCOPE)
_FORM = "application/x-www-form-urlencoded"


class Statements(Protocol):
    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None: ...


class MintRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    audience: str = Field(min_length=1, max_length=512, description="The bot's Microsoft App ID.")
    service_url: str = Field(min_length=1, max_length=2048, description="The serviceUrl the token names.")
    expires_in: int = Field(default=3600, ge=-86400, le=86400, description="Seconds; negative: already expired.")
    issuer: str = Field(default=ISSUER, min_length=1, max_length=512)


@functools.cache
def _made_pem() -> str:
    """The key this process offers a database that has none, made once a process: an RSA key costs some
    50-100 ms of CPU to make, and a stand-in's key needs to be the same for every process of one database
    (the row), not new for each database."""
    made = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return made.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


class Signer:
    """The key pair, loaded (or made and kept) once per stand-in process."""

    def __init__(self) -> None:
        self._key: rsa.RSAPrivateKey | None = None
        self._lock = asyncio.Lock()

    async def key(self, intake: Intake) -> rsa.RSAPrivateKey:
        async with self._lock:
            if self._key is None:
                row = await intake.store.fetch_one("standin.botframework_key", {"kid": KID})
                if row is None:
                    offer = {"kid": KID, "private_pem": _made_pem()}
                    await intake.store.fetch_one("standin.botframework_key_offer", offer)
                    row = await intake.store.fetch_one("standin.botframework_key", {"kid": KID})
                assert row is not None  # offered, and keys are never deleted
                loaded = serialization.load_pem_private_key(row["private_pem"].encode(), password=None)
                assert isinstance(loaded, rsa.RSAPrivateKey)
                self._key = loaded
            return self._key


def router() -> APIRouter:
    api = APIRouter()
    signer = Signer()

    @api.get("/jwks")
    async def jwks(intake: IntakeDep) -> dict[str, list[dict[str, Any]]]:
        public = (await signer.key(intake)).public_key()
        jwk: dict[str, Any] = jwt.algorithms.RSAAlgorithm.to_jwk(public, as_dict=True)
        key = {**jwk, "kid": KID, "use": "sig", "alg": ALGORITHM}
        endorsements = intake.options.botframework_endorsements
        return {"keys": [key if endorsements is None else {**key, "endorsements": list(endorsements)}]}

    @api.post("/token")
    async def token(body: MintRequest, intake: IntakeDep) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": body.issuer,
            "aud": body.audience,
            "serviceurl": body.service_url,
            "nbf": now + min(0, body.expires_in) - 60,
            "exp": now + body.expires_in,
        }
        signed = jwt.encode(claims, await signer.key(intake), algorithm=ALGORITHM, headers={"kid": KID})
        return {"token_type": "Bearer", "expires_in": body.expires_in, "access_token": signed}

    @api.get("/oauth/grants")
    async def grants(intake: IntakeDep) -> list[dict[str, Any]]:
        rows = await intake.store.fetch_all("standin.token_grants")
        return [{**r, "expires_at": r["expires_at"] and iso(r["expires_at"]),
                 "requested_at": iso(r["requested_at"])} for r in rows]  # fmt: skip

    @api.post("/oauth/expire")
    async def expire(intake: IntakeDep) -> dict[str, int]:
        return {"expired": len(await intake.store.fetch_all("standin.token_grants_expire"))}

    return api


# ----- the Microsoft identity platform's token endpoint: client credentials ------------------------------


def login_router() -> APIRouter:
    api = APIRouter()

    @api.post("/{tenant}/oauth2/v2.0/token")
    async def token(tenant: str, request: Request, intake: IntakeDep) -> Response:
        form = _form(request.headers.get("content-type", ""), await request.body())
        answer = grant(form)
        granted = answer.body.get("access_token") if answer.status == 200 else None
        await intake.store.fetch_one("standin.token_grant_record", {
            "tenant": tenant, "client_id": form.get("client_id"), "scope": form.get("scope"),
            "status": answer.status, "error": None if granted else answer.body.get("error"), "access_token": granted,
            "lifetime_s": intake.options.oauth_token_lifetime_s, "client": CLIENT.get(),
        })  # fmt: skip
        if granted:
            lasts = intake.options.oauth_token_lifetime_s
            answer = Answer(200, {**answer.body, "expires_in": lasts, "ext_expires_in": lasts})
        return respond(answer)

    return api


def _form(content_type: str, raw: bytes) -> dict[str, str]:
    """The form's fields (the first of a repeated one); a body of another type holds none, as in Entra ID."""
    if content_type.split(";")[0].strip().lower() != _FORM:
        return {}
    fields = parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in fields.items()}


def grant(form: Mapping[str, str]) -> Answer:
    """What Entra ID answers a client-credentials request, in its words (AADSTS codes); a 200 carries a
    fresh token, its lifetime filled in by the caller."""
    for name in ("grant_type", "client_id", "scope"):
        if not form.get(name):
            return _oauth(
                400, "invalid_request", 900144, f"The request body must contain the following parameter: '{name}'."
            )
    if form["grant_type"] != "client_credentials":
        return _oauth(400, "unsupported_grant_type", 70003, "The app requested an unsupported grant type "
                      f"'{form['grant_type']}'.")  # fmt: skip
    if form["client_id"] != APP_ID:
        return _oauth(400, "unauthorized_client", 700016, f"Application with identifier '{form['client_id']}' was "
                      "not found in the directory.")  # fmt: skip
    if not form.get("client_secret"):
        return _oauth(401, "invalid_client", 7000218, "The request body must contain the following parameter: "
                      "'client_assertion' or 'client_secret'.")  # fmt: skip
    if not secrets.compare_digest(form["client_secret"].encode(), APP_PASSWORD.encode()):
        return _oauth(401, "invalid_client", 7000215, "Invalid client secret provided. Ensure the secret being "
                      "sent in the request is the client secret value, not the client secret ID, for a secret "
                      f"added to app '{APP_ID}'.")  # fmt: skip
    if not form["scope"].endswith("/.default"):
        return _oauth(400, "invalid_scope", 1002012, f"The provided value for scope {form['scope']} is not valid. "
                      "Client credential flows must have a scope value with /.default suffixed to the resource "
                      "identifier (application ID URI).")  # fmt: skip
    if form["scope"] not in SCOPES:
        return _oauth(400, "invalid_resource", 500011, f"The resource principal named "
                      f"{form['scope'].removesuffix('/.default')} was not found in the tenant.")  # fmt: skip
    return Answer(200, {"token_type": "Bearer", "access_token": "standin." + secrets.token_urlsafe(32)})


def _oauth(status: int, error: str, code: int, description: str) -> Answer:
    body = {"error": error, "error_description": f"AADSTS{code}: {description}", "error_codes": [code]}
    return Answer(status, body, Effect.REFUSED)


async def bearer_refusal(statements: Statements, authorization: str | None, scope: str) -> str | None:
    """Why the connector or Graph refuses a request's bearer token (None: it is taken): missing, unknown,
    expired (database clock) or granted for another scope."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return "no bearer token"
    found = await statements.fetch_one("standin.token_grant_of", {"access_token": token.strip()})
    if found is None:
        return "the token was not granted by the token endpoint"
    if not found["live"]:
        return "the token has expired"
    if found["scope"] != scope:
        return f"the token is for {found['scope']}, not {scope}"
    return None
