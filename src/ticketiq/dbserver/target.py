"""Where a process finds its database: TICKETIQ_DATABASE_URL, or the embedded server of TICKETIQ_HOME,
started when no process of that home runs it yet."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from ticketiq.dbserver import authentication, embedded
from ticketiq.settings import Settings
from ticketiq.storage.database import APP_DATABASE, ConnectionLimits


@dataclass
class Target:
    """Where the database is, and the embedded server to release when done (if one was used)."""

    url: str = field(repr=False)  # with the password
    server: embedded.EmbeddedServer | None = None

    def release(self) -> None:
        if self.server is not None:
            embedded.release(self.server)
            self.server = None


def resolve(settings: Settings, keep: bool = False) -> Target:
    """TICKETIQ_DATABASE_URL when set; else the embedded server in TICKETIQ_HOME, started if needed. A
    URL naming that embedded server (127.0.0.1 and the port the home keeps) makes this process one of
    its users as well, as if it had started it. The URL returned carries the password: never log it
    (`authentication.without_password`)."""
    if settings.database_url:
        server = embedded.adopt(Path(settings.home), settings.database_url)
        if server is None:
            return Target(url=settings.database_url)
        # The home's own server: a URL given without its password (by hand, or by a release before
        # passwords) is given the home's, which only the home's owner reads.
        return Target(url=authentication.with_password(settings.database_url, server.password), server=server)
    server = embedded.acquire(Path(settings.home), keep=keep)
    limits = ConnectionLimits.from_settings(settings)
    with psycopg.connect(limits.conninfo(server.url()), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (APP_DATABASE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f"CREATE DATABASE {APP_DATABASE}")
    return Target(url=server.url(APP_DATABASE), server=server)
