"""Bearer tokens and who may do what (DESIGN.md, "Who may do what"): pure rules, no I/O.

A token is `tiq_` and 32 random bytes, url-safe base64. Only its SHA-256 is stored; a request's token is
hashed, looked up by that hash and compared with the stored one in constant time. Every 403 the HTTP
API gives is decided here: a role holds a set of permissions, each role all of the one below it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from ticketiq.errors import RequestError

PREFIX = "tiq_"
RANDOM_BYTES = 32
# What `mint` makes: the prefix and 43 characters of url-safe base64 (32 bytes, unpadded).
_SHAPE = re.compile(r"^tiq_[A-Za-z0-9_-]{43}$")
# Names become the actor of audit rows and decisions ("stopped by <name>"): no spaces, no ':' (internal
# actors are `run:<id>`), nothing a log line or a terminal could misread. The migration checks the same.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


class Role(StrEnum):
    CALLER = "caller"
    OPERATOR = "operator"
    ADMIN = "admin"


class Permission(StrEnum):
    START_RUNS = "start runs"
    READ_OWN_RUNS = "read the runs it started"
    READ_EVERY_RUN = "read every run"
    STOP_RUNS = "stop runs"
    HOLD_RUNS = "hold runs against the retention policy, and release them"
    DECIDE_APPROVALS = "read and decide approvals"
    READ_AUDIT = "read the audit log"
    READ_GATES = "read the gates"
    CHANGE_GATES = "change the gates"
    MANAGE_TOKENS = "manage tokens"
    READ_SCHEDULES = "read the cron schedules and their fires"
    MANAGE_SCHEDULES = "make and delete cron schedules"
    MANAGE_TRIGGERS = "declare webhook triggers and rotate their secrets"
    READ_JOBS = "read background jobs"
    RUN_JOBS = "start, cancel and restart background jobs"
    INSPECT = "make ad hoc tool calls from the inspector"


_CALLER = frozenset({Permission.START_RUNS, Permission.READ_OWN_RUNS})
_OPERATOR = _CALLER | {
    Permission.READ_EVERY_RUN,
    Permission.STOP_RUNS,
    Permission.HOLD_RUNS,
    Permission.DECIDE_APPROVALS,
    Permission.READ_AUDIT,
    Permission.READ_GATES,
    Permission.READ_SCHEDULES,
    Permission.READ_JOBS,
    Permission.RUN_JOBS,
    Permission.INSPECT,
}
_ADMIN = _OPERATOR | {
    Permission.CHANGE_GATES, Permission.MANAGE_TOKENS, Permission.MANAGE_SCHEDULES, Permission.MANAGE_TRIGGERS,
}  # fmt: skip

GRANTED: dict[Role, frozenset[Permission]] = {Role.CALLER: _CALLER, Role.OPERATOR: _OPERATOR, Role.ADMIN: _ADMIN}
ROLES = (Role.CALLER, Role.OPERATOR, Role.ADMIN)  # each may do all the one before it may


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the token's name is the actor of everything it does."""

    name: str
    role: Role
    agents: frozenset[str] | None  # the agents it may start; None: every agent


# ----- the token itself ------------------------------------------------------------------------------


def mint() -> str:
    return PREFIX + secrets.token_urlsafe(RANDOM_BYTES)


def token_hash(token: str) -> str:
    """What is stored and looked up: the SHA-256 hex of the whole token."""
    return hashlib.sha256(token.encode()).hexdigest()


def well_formed(token: str) -> bool:
    """Shaped like a token `mint` makes; anything else is refused without asking the database."""
    return _SHAPE.fullmatch(token) is not None


def matches(token: str, stored_hash: str) -> bool:
    return hmac.compare_digest(token_hash(token).encode(), stored_hash.encode())


def bearer(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case, RFC 6750);
    None when the header is missing or speaks another scheme."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


# ----- who may do what -----------------------------------------------------------------------------------


def may(role: Role, permission: Permission) -> bool:
    return permission in GRANTED[role]


def role_needed(permission: Permission) -> Role:
    """The least role that holds the permission."""
    return next(role for role in ROLES if may(role, permission))


def refusal(principal: Principal, permission: Permission) -> str | None:
    """Why the principal may not do this (the 403's message), or None when it may."""
    if may(principal.role, permission):
        return None
    needed = role_needed(permission)
    return f"token {principal.name} ({principal.role}) may not {permission}: that needs the {needed} role or above"


def may_start(principal: Principal, agent: str) -> bool:
    return may(principal.role, Permission.START_RUNS) and (principal.agents is None or agent in principal.agents)


def start_refusal(principal: Principal, agent: str) -> str | None:
    if may_start(principal, agent):
        return None
    allowed = ", ".join(sorted(principal.agents or ())) or "none"
    return f"token {principal.name} may not start agent {agent}; it may start: {allowed}"


def run_scope(principal: Principal) -> str | None:
    """Whose runs the principal reads: None for every run, else only the runs its own token started."""
    return None if may(principal.role, Permission.READ_EVERY_RUN) else principal.name


def may_read(created_by: str | None, scope: str | None) -> bool:
    """Whether a run its `created_by` token started is read under `scope` (`run_scope`)."""
    return scope is None or created_by == scope


# ----- what a new token may be ------------------------------------------------------------------------------


def checked_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise RequestError(
            "body.name",
            f"token name {name!r} is not valid: use 1 to 100 letters, digits, '.', '_', '-' or '@', "
            "starting with a letter or digit",
        )
    return name


def checked_role(role: str) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise RequestError("body.role", f"role {role!r} is not one of caller, operator, admin") from None


def checked_agents(agents: Iterable[str] | None, known: Iterable[str]) -> tuple[str, ...] | None:
    """The agents a token may start, sorted; None (every agent) stays None. Names not in the agents
    file are refused: a typo would otherwise make a token that can start nothing."""
    if agents is None:
        return None
    chosen = sorted({a.strip() for a in agents if a.strip()})
    if not chosen:
        raise RequestError("body.agents", "name at least one agent, or leave agents out for every agent")
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise RequestError(
            "body.agents", f"no agent named {', '.join(unknown)} in the agents file; known: {', '.join(sorted(known))}"
        )
    return tuple(chosen)
