"""How our Postgres servers are told who may connect, with no server: pg_hba.conf's trust found and replaced
(the lines initdb --auth=trust wrote, the embedded server's before passwords), a password put in and taken out
of a URL (read back by psycopg's own parser), the password file's mode from its first byte, and a server's
password kept out of its repr."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from ticketiq.dbserver.authentication import (
    keep_password,
    password_of,
    read_password,
    trusting_lines,
    with_password,
    without_password,
    without_trust,
)
from ticketiq.dbserver.embedded import EmbeddedServer
from ticketiq.errors import StorageError
from ticketiq.runtime.logs import SecretFilter
from ticketiq.settings import Settings

# What initdb --auth=trust (PostgreSQL 18) wrote in a home made before passwords, its comments trimmed,
# with a line an operator added (an address and a mask) and one with an option.
INITDB_TRUST = """# TYPE  DATABASE        USER            ADDRESS                 METHOD

# "local" is for Unix domain socket connections only
local   all             all                                     trust
# IPv4 local connections:
host    all             all             127.0.0.1/32            trust
# IPv6 local connections:
host    all             all             ::1/128                 trust
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
host    replication     all             ::1/128                 trust
host    trust           trust           10.0.0.0 255.0.0.0      trust   # a database and a user named trust
hostssl all             all             0.0.0.0/0               cert    clientcert=verify-full
"""


def test_every_trust_line_is_found_and_asks_for_a_password_after() -> None:
    assert len(trusting_lines(INITDB_TRUST)) == 7
    moved = without_trust(INITDB_TRUST)
    assert trusting_lines(moved) == []
    lines = moved.splitlines()
    assert "host    all             all             127.0.0.1/32            scram-sha-256" in lines
    assert "local   all             all                                     scram-sha-256" in lines
    # Only the method changed: a database and a user named trust, the comments, other methods stay.
    assert "host    trust           trust           10.0.0.0 255.0.0.0      scram-sha-256   # a database and a " \
           "user named trust" in lines  # fmt: skip
    assert "hostssl all             all             0.0.0.0/0               cert    clientcert=verify-full" in lines
    assert [line for line in lines if line.startswith("#")] == [
        line for line in INITDB_TRUST.splitlines() if line.startswith("#")
    ]
    assert without_trust(moved) == moved


def test_a_file_without_trust_has_nothing_to_move() -> None:
    hba = "host all all 127.0.0.1/32 scram-sha-256\n# host all all 0.0.0.0/0 trust (a comment)\n"
    assert trusting_lines(hba) == []
    assert without_trust(hba) == hba


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:20123/ticketiq",
        "postgresql://postgres@127.0.0.1:21001,127.0.0.1:21002/ticketiq?target_session_attrs=read-write",
        "host=127.0.0.1 port=20123 user=postgres dbname=ticketiq",
    ],
)
def test_a_url_is_given_the_password_and_shown_without_it(url: str) -> None:
    secret = "Zx_9-secret"
    carried = with_password(url, secret)
    params = conninfo_to_dict(carried)
    assert params["password"] == secret and password_of(carried) == secret
    assert {k: v for k, v in params.items() if k != "password"} == conninfo_to_dict(url)  # nothing else moved
    shown = without_password(carried)
    assert secret not in shown and "***" in shown
    assert with_password(carried, "another") == carried  # a password it has is kept
    assert password_of(url) is None


def test_a_password_with_characters_a_url_reserves_survives_the_url() -> None:
    carried = with_password("postgresql://postgres@127.0.0.1:5432/t", "p@ss:w/rd?#")
    assert conninfo_to_dict(carried)["password"] == "p@ss:w/rd?#"
    assert "p@ss" not in without_password(carried)
    assert without_password("postgresql://u@h/t?password=s3cret&sslmode=require") == (
        "postgresql://u@h/t?password=***&sslmode=require"
    )


def test_the_password_file_is_private_from_its_first_byte_and_made_once(tmp_path: Path) -> None:
    path = tmp_path / "pg.password"
    old = os.umask(0o022)  # a umask that would leave a new file world-readable
    try:
        made = keep_password(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(made) >= 40 and made.isascii()
    assert keep_password(path) == made == read_password(path)  # kept, never made again
    path.chmod(0o644)  # widened by hand: libpq would ignore such a file, and others could read it
    assert read_password(path) == made
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keep_password(tmp_path / "another") != made


def test_a_missing_or_empty_password_file_says_which_file(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match=r"pg\.password .* is missing"):
        read_password(tmp_path / "pg.password")
    (tmp_path / "pg.password").write_text("\n")
    with pytest.raises(StorageError, match="is empty"):
        read_password(tmp_path / "pg.password")


def test_a_server_shown_in_a_log_or_an_error_does_not_show_its_password() -> None:
    server = EmbeddedServer(home=Path("/srv/home"), port=20123, password="Zx_9-secret")
    assert "Zx_9-secret" not in repr(server) and "Zx_9-secret" not in str(server)
    assert password_of(server.url("ticketiq")) == "Zx_9-secret"
    assert conninfo_to_dict(server.url("ticketiq"))["dbname"] == "ticketiq"


def test_the_database_url_s_password_is_a_secret_no_log_line_shows() -> None:
    """The URL is no secret (it is printed, masked); its password is, as the API keys are: every log line
    and transcript is scrubbed of `Settings.secrets()`."""
    settings = Settings(database_url="postgresql://postgres:Zx_9-secret-Zx_9-secret@127.0.0.1:20123/ticketiq")
    assert "Zx_9-secret-Zx_9-secret" in settings.secrets()
    assert Settings(database_url="postgresql://postgres@127.0.0.1:20123/ticketiq").secrets() == Settings().secrets()
    # A developer's `postgres` would scrub the word from every transcript: a short password is not taken.
    assert Settings(database_url="postgresql://postgres:postgres@db:5432/t").secrets() == Settings().secrets()
    record = logging.LogRecord(
        "ticketiq", logging.ERROR, __file__, 1, "cannot reach %s", (settings.database_url,), None
    )
    SecretFilter(settings.secrets()).filter(record)
    assert "Zx_9-secret" not in record.getMessage() and "127.0.0.1:20123" in record.getMessage()
