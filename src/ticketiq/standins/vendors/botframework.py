"""Bot Framework token service stand-in (under /_standin/botframework): the keys the Bot Framework signs
its tokens to a bot with, and a mint for such tokens, so tests and operators send real signed
activities to `POST /v1/teams/messages`.

    GET  /_standin/botframework/jwks    {"keys": [JWK]}: the RS256 public key (with its `kid`)
    POST /_standin/botframework/token   {audience, service_url, expires_in?, issuer?}
                                        -> {token_type, expires_in, access_token}

A token says what the Bot Framework's do: `iss` (https://api.botframework.com unless `issuer` says
otherwise), `aud` (the bot's app id), `serviceurl`, `nbf` and `exp` (`expires_in` seconds from now,
an hour by default; a negative value mints one that has expired). The RSA key pair is made on first use
and kept in `standin.botframework_keys`, so a restart of the stand-ins, or a second stand-in process on
the same database, signs with the same key.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.standins.vendors.intake import Intake, IntakeDep

KID = "standin-botframework-1"
ISSUER = "https://api.botframework.com"
ALGORITHM = "RS256"


class MintRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    audience: str = Field(min_length=1, max_length=512, description="The bot's Microsoft App ID.")
    service_url: str = Field(min_length=1, max_length=2048, description="The serviceUrl the token names.")
    expires_in: int = Field(default=3600, ge=-86400, le=86400, description="Seconds; negative: already expired.")
    issuer: str = Field(default=ISSUER, min_length=1, max_length=512)


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
                    made = rsa.generate_private_key(public_exponent=65537, key_size=2048)
                    pem = made.private_bytes(
                        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                    ).decode()
                    await intake.store.fetch_one("standin.botframework_key_offer", {"kid": KID, "private_pem": pem})
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
        return {"keys": [{**jwk, "kid": KID, "use": "sig", "alg": ALGORITHM, "endorsements": ["msteams"]}]}

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

    return api
