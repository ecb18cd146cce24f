"""The follows a process holds open: event streams (`GET /v1/runs/{id}/events`) and long waits on a run
(issue 32). How many each principal and the process may hold at once, and each one ended when the
credential it was opened with ends.

- Caps: `TICKETIQ_MAX_STREAMS_PER_PRINCIPAL` a principal (a token, with the console sessions signed in
  with it), `TICKETIQ_MAX_STREAMS` in all, streams and long waits alike; a run's `?wait=` (issue 35) is
  held outside them (`capped=False`), bounded by TICKETIQ_MAX_WAITERS. One more is refused (`TooMany`, 429)
  before anything is read, so a refusal costs no statement; its Retry-After is the time until the
  soonest follow that holds the cap must end.
- A follow carries its credential: the token's name, and the session's id hash when a console session
  lent the request. A revoked token ends every follow of it (its sessions' too); an ended session ends
  its own. Both are heard on the process's one listening connection (`engine/gate_watch.py`:
  `ticketiq_tokens`, `ticketiq_sessions`), whichever process revoked or signed out. A credential heard
  ended is remembered: a request authenticated just before the end that opens its follow just after is
  refused (`CredentialEnded`), never left open. A token's row changes only when it is revoked, and names
  and session ids are never used again, so what is remembered never refuses a live credential.
- Ends that were not heard (the listener was down, a notification lost in a failover) are found by a
  look at the credentials held (`CredentialCheck`): at once when the listener comes back, every
  `UNHEARD_CHECK_S` while it is down, every `SAFETY_CHECK_S` while it is up.

`Follows` is plain state and the decisions are pure functions; `CredentialCheck` is the loop that reads.
A later long wait takes its slot as a stream does: `async with follows.slot(credential, "wait", s)`, and
stops when the follow's `ended` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass

from ticketiq.engine.gate_watch import GateWatch
from ticketiq.errors import StorageError, TicketIQError
from ticketiq.runtime.background import Background
from ticketiq.storage.console_store import ConsoleStore
from ticketiq.storage.token_store import TokenStore

log = logging.getLogger(__name__)

UNHEARD_CHECK_S = 1.0  # the listener is down: an end may go unheard
SAFETY_CHECK_S = 30.0  # the listener is up: a notification lost in a failover
TICK_S = 0.25  # how often the check asks itself whether a look is due (no statement)
ENDED_KEPT = 4096  # credentials heard ended, remembered (the newest) to refuse a follow opened after

REVOKED = "its token was revoked"
SIGNED_OUT = "its console session ended"


@dataclass(frozen=True)
class Credential:
    """What a request was authenticated by: a token (by name: the principal), or a console session (its
    id's hash) acting as the token it was signed in with."""

    token: str
    session: str | None = None


class TooMany(TicketIQError):
    """A follow over a cap: answered 429, retry after `retry_after_s`. `principal`: the principal whose own
    cap it was (None: the process's)."""

    def __init__(self, message: str, retry_after_s: int, principal: str | None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.principal = principal


class CredentialEnded(TicketIQError):
    """The credential of a follow being opened was heard ended since the request was authenticated."""


class Follow:
    """One stream or wait held open: until `deadline` (the monotonic clock) or until `ended` is set."""

    def __init__(self, credential: Credential, kind: str, deadline: float) -> None:
        self.credential = credential
        self.kind = kind
        self.deadline = deadline
        self.ended = asyncio.Event()
        self.why: str | None = None  # why it was ended, once it was
        self._told: list[Callable[[], None]] = []

    def end(self, why: str) -> None:
        if self.ended.is_set():
            return
        self.why = why
        self.ended.set()
        for tell in self._told:
            tell()

    def when_ended(self, tell: Callable[[], None]) -> None:
        """Call `tell` when the follow is ended (at once if it was)."""
        if self.ended.is_set():
            tell()
        else:
            self._told.append(tell)


def refusal(by_principal: int, held: int, per_principal: int, total: int, principal: str) -> str | None:
    """Why one more follow is refused to a principal holding `by_principal` of the `held` open; None: it
    may open it."""
    if by_principal >= per_principal:
        return (f"{principal} holds {by_principal} event streams open on this process, its most "
                f"(TICKETIQ_MAX_STREAMS_PER_PRINCIPAL={per_principal}): close one, or retry later")  # fmt: skip
    if held >= total:
        return (f"this process holds {held} event streams open, its most (TICKETIQ_MAX_STREAMS={total}): "
                "retry later, or on another process")  # fmt: skip
    return None


def retry_after_s(deadlines: Iterable[float], now: float) -> int:
    """Whole seconds until the soonest of these follows must end (at least 1)."""
    soonest = min(deadlines, default=now + 1.0)
    return max(1, math.ceil(soonest - now))


def check_due(since_check_s: float, listening: bool, reconnected: bool) -> bool:
    """Whether the credentials held are looked at now."""
    if reconnected:
        return True  # what was missed while the listener was away is unknown
    return since_check_s >= (SAFETY_CHECK_S if listening else UNHEARD_CHECK_S)


class Follows:
    def __init__(self, per_principal: int, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_principal = per_principal
        self.total = total
        self.clock = clock
        self._held: dict[str, set[Follow]] = {}  # principal -> its follows
        self._count = 0
        # Waits (`GET /v1/runs/{id}?wait=`): ended with their credential like any follow, but bounded by
        # TICKETIQ_MAX_WAITERS (entries/run_wait.py), not by the event streams' caps: a client keeping 32
        # runs in flight waits for each of them at once.
        self._waits: dict[str, set[Follow]] = {}
        self._ended_tokens: OrderedDict[str, None] = OrderedDict()
        self._ended_sessions: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return self._count

    def held_by(self, principal: str) -> int:
        return len(self._held.get(principal, ()))

    def open(self, credential: Credential, kind: str, lasts_s: float, capped: bool = True) -> Follow:
        """A follow held from now, at most `lasts_s`: TooMany over a cap, CredentialEnded when its
        credential was heard ended. Close it with `close` (or take it with `slot`). Not `capped` (a
        wait's): held under no cap of this class, its bound kept by its caller."""
        if self._ended(credential):
            raise CredentialEnded(REVOKED if credential.token in self._ended_tokens else SIGNED_OUT)
        if not capped:
            follow = Follow(credential, kind, self.clock() + lasts_s)
            self._waits.setdefault(credential.token, set()).add(follow)
            return follow
        mine = self._held.get(credential.token, set())
        why = refusal(len(mine), self._count, self.per_principal, self.total, credential.token)
        now = self.clock()
        if why is not None:
            own = len(mine) >= self.per_principal
            full = mine if own else self._streams()
            raise TooMany(why, retry_after_s((f.deadline for f in full), now), credential.token if own else None)
        follow = Follow(credential, kind, now + lasts_s)
        self._held.setdefault(credential.token, set()).add(follow)
        self._count += 1
        return follow

    def close(self, follow: Follow) -> None:
        waits = self._waits.get(follow.credential.token)
        if waits is not None and follow in waits:
            waits.discard(follow)
            if not waits:
                del self._waits[follow.credential.token]
            return
        mine = self._held.get(follow.credential.token)
        if mine is None or follow not in mine:
            return
        mine.discard(follow)
        self._count -= 1
        if not mine:
            del self._held[follow.credential.token]

    @contextlib.asynccontextmanager
    async def slot(self, credential: Credential, kind: str, lasts_s: float) -> AsyncIterator[Follow]:
        """A follow held for the block (a long wait's): raises as `open` does."""
        follow = self.open(credential, kind, lasts_s)
        try:
            yield follow
        finally:
            self.close(follow)

    def token_ended(self, name: str) -> None:
        """The token was revoked: every follow of it ends, its sessions' too."""
        _remember(self._ended_tokens, name)
        for follow in [*self._held.get(name, ()), *self._waits.get(name, ())]:
            follow.end(REVOKED)

    def session_ended(self, id_hash: str) -> None:
        """The console session ended (signed out, expired): the follows it opened end."""
        _remember(self._ended_sessions, id_hash)
        for follow in self._every():
            if follow.credential.session == id_hash:
                follow.end(SIGNED_OUT)

    def credentials(self) -> tuple[set[str], set[str]]:
        """The tokens (names) and sessions (id hashes) the open follows were opened with."""
        held = self._every()
        return {f.credential.token for f in held}, {s for f in held if (s := f.credential.session) is not None}

    def checked(self, tokens: Collection[str], unrevoked: Collection[str], sessions: Collection[str],
                alive: Collection[str]) -> None:  # fmt: skip
        """A look found, of the `tokens` and `sessions` it asked about, these `unrevoked` and `alive`: the
        rest ended. A follow opened after the look began is judged only if its credential was asked about."""
        for name in set(tokens) - set(unrevoked):
            self.token_ended(name)
        for id_hash in set(sessions) - set(alive):
            self.session_ended(id_hash)

    def _ended(self, credential: Credential) -> bool:
        return credential.token in self._ended_tokens or (
            credential.session is not None and credential.session in self._ended_sessions
        )

    def _every(self) -> list[Follow]:
        """Every follow held, waits included (the credentials looked at, the sessions ended)."""
        return [f for held in (self._held, self._waits) for mine in held.values() for f in mine]

    def _streams(self) -> list[Follow]:
        return [f for mine in self._held.values() for f in mine]


def _remember(ended: OrderedDict[str, None], key: str) -> None:
    ended[key] = None
    ended.move_to_end(key)
    while len(ended) > ENDED_KEPT:
        ended.popitem(last=False)


class CredentialCheck:
    """Looks at the credentials the open follows hold, when `check_due` says: one statement for the tokens,
    one for the sessions, whatever the number of follows; none while none is open."""

    def __init__(self, follows: Follows, tokens: TokenStore, sessions: ConsoleStore, watch: GateWatch) -> None:
        self.follows = follows
        self.tokens = tokens
        self.sessions = sessions
        self.watch = watch
        self.looks = 0  # looks that read the database
        self._background = Background("credential-check", self.run)

    async def look(self) -> None:
        names, hashes = self.follows.credentials()
        unrevoked = await self.tokens.unrevoked(names) if names else set()
        alive = await self.sessions.alive(hashes) if hashes else set()
        self.looks += 1
        self.follows.checked(names, unrevoked, hashes, alive)

    async def run(self) -> None:
        looked_at = -math.inf
        listens = self.watch.listens
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            reconnected = self.watch.listens != listens
            if not len(self.follows) or not check_due(now - looked_at, self.watch.connected, reconnected):
                continue
            seen_listens = self.watch.listens
            try:
                await self.look()
            except StorageError as exc:
                log.warning("could not look at the credentials of %d open event streams (%s); looking again in "
                            "%g s", len(self.follows), exc, UNHEARD_CHECK_S)  # fmt: skip
                await asyncio.sleep(UNHEARD_CHECK_S)
                continue  # still due
            listens, looked_at = seen_listens, now

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
