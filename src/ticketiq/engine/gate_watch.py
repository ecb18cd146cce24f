"""Knows when the gates' state changed, so runs re-read their gate facts only then; and when a token
changed, so requests are authenticated from the process's cache of found tokens until then.

A dedicated connection LISTENs on `ticketiq_gates` (triggers on the gate tables and on Stop requests
notify it). Every notification bumps `generation`; facts read under an older generation are stale.
The same connection LISTENs on `ticketiq_tokens` (a trigger on `api_tokens` notifies the token's name
when it is revoked, migration 027): the token is dropped from `tokens` (`auth/token_cache.py`).
While the listener is not connected, nothing is trusted from cache: every step reads afresh, every
request looks its token up; once it is back, the token cache starts empty (what it missed is unknown).

Each revocation is also handed to `on_token`, and a console session's end (sign-out: `ticketiq_sessions`,
notified by the statement that deletes it, with the id's hash) to `on_session`: the event streams opened
with either end (`views/follows.py`).

The same connection LISTENs on `ticketiq_runs` too (a trigger on `runs` notifies a run's id when its
status changes) and hands each id to `on_run`, and says when it starts or stops listening to
`on_listening`: the run events followers wait on (`views/run_events.py`) come from here, so a process
listens on one connection for all three rather than a connection each (each is a server backend).

A listener that hears nothing may be one whose peer went silent: it would leave the cache trusted
while changes go unseen. So a quiet listener is asked to answer a ping every `check_s`, within as
long; one that does not is dropped (the cache is distrusted) and opened again within the connect
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from ticketiq.auth.token_cache import TokenCache
from ticketiq.runtime.background import Background
from ticketiq.storage import database
from ticketiq.storage.database import DEFAULT_LIMITS, ConnectionLimits
from ticketiq.storage.outage import backoff_s
from ticketiq.storage.token_store import Credential

log = logging.getLogger(__name__)

GATES = "ticketiq_gates"
TOKENS = "ticketiq_tokens"
RUNS = "ticketiq_runs"  # payload: the id of a run whose status changed
SESSIONS = "ticketiq_sessions"  # payload: the SHA-256 of an ended console session's id


def _ignore_run(run_id: str) -> None:
    return None


def _ignore_listening(listening: bool) -> None:
    return None


def _ignore_ended(name: str) -> None:
    return None


class GateWatch:
    def __init__(self, url: str, limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
        self.url = url
        self.limits = limits
        # As long as TCP keepalives would take to notice a silent peer's first missed probe.
        self.check_s = max(1.0, limits.keepalive_s)
        self.generation = 0
        self.connected = False
        self.listens = 0  # LISTENs that succeeded
        self.tokens: TokenCache[Credential] = TokenCache()
        self.on_run: Callable[[str], None] = _ignore_run  # a run's status changed (a wake-up, not the truth)
        self.on_listening: Callable[[bool], None] = _ignore_listening  # the listener came up (True) or went
        self.on_token: Callable[[str], None] = _ignore_ended  # a token (by name) was revoked
        self.on_session: Callable[[str], None] = _ignore_ended  # a console session (its id's hash) ended
        self._background = Background("gate-watch", self.run)

    def current(self) -> int | None:
        """The generation to tag facts read now with, or None when no cache may be trusted."""
        return self.generation if self.connected else None

    async def _listen_once(self) -> None:
        conn = await database.connect(self.url, self.limits)  # within the connect timeout
        try:
            await database.listen(conn, GATES, within_s=self.limits.answer_within_s)
            await database.listen(conn, TOKENS, within_s=self.limits.answer_within_s)
            await database.listen(conn, RUNS, within_s=self.limits.answer_within_s)
            await database.listen(conn, SESSIONS, within_s=self.limits.answer_within_s)
            self.generation += 1  # anything may have changed while we were not listening
            self.tokens.listening()
            self.connected = True
            self.listens += 1
            self.on_listening(True)
            while True:
                async for heard in conn.notifies(timeout=self.check_s):
                    if heard.channel == RUNS:
                        self.on_run(heard.payload)  # a run's status: no gate fact changed
                    elif heard.channel == TOKENS:
                        self.tokens.changed(heard.payload)
                        self.generation += 1  # a run's starter is a token: a delegation's gate reads it again
                        self.on_token(heard.payload)
                    elif heard.channel == SESSIONS:
                        self.on_session(heard.payload)  # no gate fact changed
                    else:
                        self.generation += 1
                # Notifications that arrive during the ping wait on the connection for the next wait.
                await database.ping(conn, within_s=self.check_s)
        finally:
            was_listening = self.connected
            self.connected = False
            self.tokens.lost()
            self.generation += 1
            if was_listening:
                self.on_listening(False)
            with contextlib.suppress(Exception):
                await conn.close()

    async def run(self) -> None:
        tries = 0
        while True:
            listened = self.listens
            try:
                await self._listen_once()
            except Exception as exc:  # any loss of the listener: read afresh, reconnect
                log.warning("gate listener lost (%s); reading gate facts and tokens afresh until it is back", exc)
            # Back soon after a failover, and no storm of attempts while there is no primary.
            tries = 0 if self.listens > listened else tries + 1
            await asyncio.sleep(backoff_s(tries))

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
