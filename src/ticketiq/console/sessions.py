"""Console sign-in: a pasted token becomes a server-side session; forms carry its CSRF token.

The browser holds a random session id in an HttpOnly, SameSite=Strict cookie (Secure when the request
came over https); the database holds only the id's SHA-256, the name of the token it acts as (a revoked
token ends it), the CSRF secret and the expiry (`storage/console_store.py`). The token itself is never
put in a cookie or a page. A session acts exactly as its token: the same role, the same agents, the same
runs (`tokens.run_scope`).

Every form that changes something carries the session's CSRF secret in the field `csrf`, compared in
constant time before anything is read or written; the sign-in form carries one bound to a short-lived
cookie of its own (double submit), since no session exists yet.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from ticketiq.auth.tokens import Principal, Role
from ticketiq.storage.console_store import ConsoleStore

COOKIE = "ticketiq_console"
LOGIN_COOKIE = "ticketiq_console_login"
LOGIN_COOKIE_S = 3600  # the sign-in form's CSRF cookie: long enough to find and paste a token
CSRF_FIELD = "csrf"
HOME = "/console/runs"
_SECRET = re.compile(r"^[A-Za-z0-9_-]{43}$")  # 32 random bytes, url-safe base64, unpadded


@dataclass(frozen=True)
class Session:
    principal: Principal
    csrf: str
    id_hash: str


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def id_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def well_formed(value: str | None) -> bool:
    """Shaped like a secret `new_secret` makes; anything else is refused without asking the database."""
    return value is not None and _SECRET.fullmatch(value) is not None


def csrf_ok(sent: str | None, expected: str | None) -> bool:
    if not sent or not expected:
        return False
    return hmac.compare_digest(sent.encode(), expected.encode())


def secure_cookie(scheme: str) -> bool:
    """Secure when the request came over https: the scheme uvicorn took from the connection, or from
    the X-Forwarded-Proto of a trusted proxy (the edge sets it itself, `edge.py`)."""
    return scheme == "https"


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only (never another site, `//host` included)."""
    if not target or not (target == "/console" or target.startswith("/console/")) or "\\" in target:
        return HOME
    if any(ord(c) < 0x20 for c in target) or ".." in target.split("?")[0].split("/"):
        return HOME
    return target


def store_of(conn: HTTPConnection) -> ConsoleStore:
    return ConsoleStore(conn.app.state.process.db)


async def current(conn: HTTPConnection) -> Session | None:
    """The session the request's cookie names, if it holds and its token is not revoked."""
    session_id = conn.cookies.get(COOKIE)
    if not well_formed(session_id):
        return None
    assert session_id is not None
    hashed = id_hash(session_id)
    found = await store_of(conn).get(hashed)
    if found is None:
        return None
    agents = None if found.agents is None else frozenset(found.agents)
    return Session(Principal(found.token_name, Role(found.role), agents), found.csrf_secret, hashed)


async def principal_of(conn: HTTPConnection) -> tuple[Principal, str] | None:
    """For `BearerAuth`: the principal a console session lends a GET of `/v1/runs...` (the page's live
    updates), with the session's id hash (its event streams end when it does), or None."""
    session = await current(conn)
    return None if session is None else (session.principal, session.id_hash)
