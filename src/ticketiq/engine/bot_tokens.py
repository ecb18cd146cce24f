"""Bot Framework tokens (DESIGN.md, "Who may do what"): what a verified token's claims must say.

The Teams entry point has PyJWT verify the signature (RS256, by a key of the token service's JWKS) and,
by the same rules as here, the expiry, issuer and audience. These pure rules restate them with the
clock as an argument, so they are unit-tested and hold whatever the library's defaults become, and add
the one the library cannot know: the activity's serviceUrl must be the token's `serviceurl` claim. Our
reply (and the bot's connector token with it) goes to that URL, so an activity can send it only where
the Bot Framework said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The clock skew allowed on `exp` and `nbf`: the Bot Framework SDKs allow five minutes.
LEEWAY_S = 300.0
ALGORITHM = "RS256"


@dataclass(frozen=True)
class Expected:
    issuer: str
    audience: str  # the bot's Microsoft App ID
    leeway_s: float = LEEWAY_S


def token_refusal(claims: Mapping[str, Any], expected: Expected, now: float) -> str | None:
    """Why a token whose signature verified is still refused, or None when it is accepted."""
    if claims.get("iss") != expected.issuer:
        return f"the token's issuer is {claims.get('iss')!r}, not {expected.issuer!r}"
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if expected.audience not in audiences:
        return f"the token is for audience {audience!r}, not this bot ({expected.audience!r})"
    expires = claims.get("exp")
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        return "the token has no expiry (exp)"
    if now > expires + expected.leeway_s:
        return f"the token expired {now - expires:.0f} s ago"
    starts = claims.get("nbf")
    if starts is not None:
        if not isinstance(starts, int | float) or isinstance(starts, bool):
            return "the token's nbf is not a time"
        if now < starts - expected.leeway_s:
            return f"the token is not valid for another {starts - now:.0f} s"
    if not isinstance(claims.get("serviceurl"), str) or not claims["serviceurl"]:
        return "the token names no serviceurl"
    return None


def service_url_refusal(claims: Mapping[str, Any], service_url: str) -> str | None:
    """Why the activity's serviceUrl is refused: it must be the one the token names (a trailing slash
    aside)."""
    named = claims.get("serviceurl")
    if not isinstance(named, str) or named.rstrip("/") != service_url.rstrip("/"):
        return f"the activity's serviceUrl {service_url!r} is not the one its token names ({named!r})"
    return None
