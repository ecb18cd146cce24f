"""A process that uses its home's embedded server watches it and starts it again when it was killed.

Postgres restarts are survived by reconnecting (the pool and every dedicated connection try again with
backoff); that is enough for a server someone restarts. An embedded server killed (SIGKILL, the OOM
killer, a crash) has nobody to restart it but the processes that use it: each looks at its postmaster
every `WATCH_EVERY_S` (a file read, no statement), and when it is gone, one of them (under the home's
lock, `embedded.revive`) starts it again on the port the home keeps, so every URL handed out still
reaches it; the others find it running and just reconnect. A server stopped on purpose (`ticketiq db
stop`) is left stopped (`postmaster.revival`): the processes wait, `/readyz` 503, until it is started
again on purpose.
"""

from __future__ import annotations

import asyncio
import logging

from ticketiq.dbserver import embedded
from ticketiq.dbserver.embedded import EmbeddedServer, Revived, ServerStartFailed
from ticketiq.dbserver.postmaster import ServerState, StartFailure
from ticketiq.runtime.background import Background

log = logging.getLogger(__name__)

WATCH_EVERY_S = 0.25  # detection costs a file read; the kill-to-ready time is mostly the start itself
RETRY_S = 1.0  # after a start that failed


class ServerWatch:
    def __init__(self, server: EmbeddedServer, every_s: float = WATCH_EVERY_S) -> None:
        self.server = server
        self.every_s = every_s
        self.started = 0  # how often this process started it again
        self.looks = 0  # how often it looked
        self.last: Revived | None = None  # what the last look found, once it found it not ready
        self._said = ""  # the last thing logged, so each turn of events is logged once
        self._loop = Background("embedded-server-watch", self._watch)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _watch(self) -> None:
        where = self.server.home / "pg"
        while True:
            await asyncio.sleep(self.every_s)
            self.looks += 1
            if embedded.state(self.server.home) is ServerState.READY:
                if self._said:
                    log.info("the embedded postgres in %s runs again on port %s", where, self.server.port)
                    self._said = ""
                continue
            try:
                # A thread: the start waits on pg_ctl; the lock is only tried, never waited for.
                found = await asyncio.to_thread(embedded.revive, self.server)
            except ServerStartFailed as exc:
                if exc.failure is StartFailure.OLD_PROCESSES:
                    self._say(logging.INFO, f"the embedded postgres in {where} was killed; waiting for its old "
                                            f"processes to exit before starting it again ({exc})")  # fmt: skip
                else:
                    self._say(logging.ERROR, f"cannot start the embedded postgres in {where} again: {exc}")
                await asyncio.sleep(RETRY_S)
                continue
            except Exception as exc:  # pg_ctl timed out, the folder is unreadable: said, tried again
                self._say(logging.ERROR, f"cannot start the embedded postgres in {where} again: {exc!r}")
                await asyncio.sleep(RETRY_S)
                continue
            self.last = found
            if found is Revived.STARTED:
                self.started += 1
                self._say(logging.WARNING, f"the embedded postgres in {where} was gone (its postmaster killed or "
                                           f"crashed): started it again on port {self.server.port}")  # fmt: skip
            elif found is Revived.LEFT_STOPPED:
                self._say(logging.WARNING, f"the embedded postgres in {where} was stopped on purpose (`ticketiq db "
                                           f"stop`): left stopped; `ticketiq db url` starts it again on port "
                                           f"{self.server.port}, and this process reconnects")  # fmt: skip

    def _say(self, level: int, message: str) -> None:
        if message != self._said:
            log.log(level, message)
            self._said = message
