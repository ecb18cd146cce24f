"""Bot Framework tokens (DESIGN.md, "Who may do what"): what a verified token's claims must say.

The Teams entry point has PyJWT verify the signature (RS256, by a key of the token service's JWKS) and,
by the same rules as here, the expiry, issuer and audience. These pure rules restate them with the
clock as an argument, so they are unit-tested and hold whatever the library's defaults become, and add
the ones the library cannot know: the activity's serviceUrl must be the token's `serviceurl` claim (our
reply, and the bot's connector token with it, goes to that URL, so an activity can send it only where
the Bot Framework said), and the key that signed the token must be endorsed for the activity's channel.

Endorsements: the token service's keys list the channels each may sign for (`endorsements`, e.g.
`["msteams", "skype"]`); a token signed by a key not endorsed for the activity's `channelId` is refused.
As the Bot Framework SDKs do (.NET `EndorsementsRetriever` and `JwtTokenExtractor`, Python
`JwtTokenExtractor`): a key without the field is not checked, and an activity without a channelId
asserts no channel, so it is not checked either (the inbox stores only `msteams` messages anyway). A key
whose field is there but empty is endorsed for nothing (.NET and JS refuse it; Python lets it through).
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


def endorsements(key_set: Any) -> dict[str, Any]:
    """Each key id's `endorsements`, as the key set (JWKS) lists it; a key without the field is left out."""
    keys = key_set.get("keys") if isinstance(key_set, Mapping) else None
    found: dict[str, Any] = {}
    for key in keys if isinstance(keys, list) else []:
        if isinstance(key, Mapping) and isinstance(key.get("kid"), str) and "endorsements" in key:
            found.setdefault(key["kid"], key["endorsements"])
    return found


def endorsement_refusal(key_id: str | None, endorsed: Mapping[str, Any], channel_id: str | None) -> str | None:
    """Why the signing key `key_id` may not sign for the activity's channel, or None when it may."""
    if key_id is None or key_id not in endorsed or not channel_id:
        return None
    channels = endorsed[key_id]
    if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
        return f"the signing key {key_id!r} lists its endorsements in a shape that is not a list of channels"
    if channel_id not in channels:
        return (f"the signing key {key_id!r} is not endorsed for the channel {channel_id!r} "
                f"(it is for: {', '.join(channels) or 'none'})")  # fmt: skip
    return None
