"""Who may connect to the embedded server of a home, for real (a home of its own, not the suite's Postgres):
every client gives the password kept in the home (0600), so its URL without the password, or with another,
is refused, another OS user of the machine included (`nobody`, as root switches to it); and a home made
before passwords (initdb --auth=trust: any local user was its superuser) is moved to its password on its
first start, running or stopped, with its data."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ticketiq.dbserver import authentication, embedded
from ticketiq.dbserver.postmaster import ServerState
from ticketiq.dbserver.target import resolve
from ticketiq.errors import StorageError
from ticketiq.settings import Settings

ROOT = os.geteuid() == 0
NOT_ROOT = "only root can switch to the user nobody (runuser) to connect as another OS user"


@pytest.fixture
def home() -> Iterator[Path]:
    """A home of its own, outside pytest's temporary root (whose mode pytest narrows at each session)."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-access-") as folder:
        path = Path(folder) / "home"
        try:
            yield path
        finally:
            embedded.stop(path)


def without_password(url: str) -> str:
    params = conninfo_to_dict(url)
    params.pop("password", None)
    return make_conninfo("", **params)


def connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    # No passfile or PGPASSWORD of this machine's may give libpq a password the URL does not carry.
    return psycopg.connect(url, passfile="/nonexistent/.pgpass", connect_timeout=10, autocommit=True)


def refused(url: str) -> str:
    """The server's (or libpq's) refusal of `url`; fails the test if it lets the client in."""
    with pytest.raises(psycopg.OperationalError) as caught:
        connect(url).close()
    return str(caught.value)


def as_nobody(url: str) -> subprocess.CompletedProcess[str]:
    """`psql` of the wheel (which root's server user runs too, so any user may) run as the OS user nobody,
    never prompting for a password."""
    psql = str(embedded.client("psql"))
    return subprocess.run(
        ["runuser", "-u", "nobody", "--", psql, "-w", "-X", "-At", "-d", url, "-c", "SELECT current_user"],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PGPASSFILE": "/nonexistent/.pgpass", "HOME": "/nonexistent"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def as_made_before_passwords(home: Path) -> None:
    """Make the home what a release before passwords made (initdb --auth=trust): the role without a
    password, pg_hba.conf trusting, no password file. The server is left running, reloaded."""
    server = embedded.acquire(home, keep=True)
    hba = home.resolve() / "pg" / "pg_hba.conf"
    with connect(server.url()) as conn:
        conn.execute("ALTER ROLE postgres PASSWORD NULL")
        owner = hba.stat()
        hba.write_text(hba.read_text().replace(authentication.METHOD, "trust"))
        os.chown(hba, owner.st_uid, owner.st_gid)
        conn.execute("SELECT pg_reload_conf()")
    embedded.password_path(home).unlink()


def test_a_new_home_asks_every_client_for_the_password_it_keeps_private(home: Path) -> None:
    server = embedded.acquire(home)
    kept = embedded.password_path(home)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert kept.read_text().strip() == server.password
    assert authentication.trusting_lines((home / "pg" / "pg_hba.conf").read_text()) == []
    assert not (home / "pg.initdb-password").exists()  # initdb's copy is gone
    with connect(server.url()) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    assert "no password supplied" in refused(without_password(server.url()))
    wrong = without_password(server.url()) + " password=guessed"
    assert 'password authentication failed for user "postgres"' in refused(wrong)


@pytest.mark.skipif(not ROOT, reason=NOT_ROOT)
def test_another_os_user_is_refused_and_cannot_read_the_password(home: Path) -> None:
    server = embedded.acquire(home)
    denied = as_nobody(without_password(server.url()))
    assert denied.returncode != 0 and "no password supplied" in denied.stderr, denied.stdout + denied.stderr
    peek = subprocess.run(["runuser", "-u", "nobody", "--", "cat", str(embedded.password_path(home))],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    assert server.password not in peek.stdout


@pytest.mark.parametrize("running", [True, False], ids=["running", "stopped"])
def test_a_home_made_with_trust_is_moved_to_a_password_on_its_first_start_with_its_data(
    home: Path, running: bool
) -> None:
    before = embedded.acquire(home, keep=True)
    with connect(before.url()) as conn:
        conn.execute("CREATE TABLE kept (n int PRIMARY KEY)")
        conn.execute("INSERT INTO kept SELECT generate_series(1, 500)")
    as_made_before_passwords(home)
    passwordless = without_password(before.url())
    if ROOT:  # as it was: any local user in, as the superuser
        let_in = as_nobody(passwordless)
        assert let_in.returncode == 0 and let_in.stdout.strip() == "postgres", let_in.stderr
    with connect(passwordless) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (500,)
    if not running:
        assert embedded.stop(home)

    after = embedded.acquire(home, keep=True)  # the first start of this release: `ticketiq db url`, a process

    assert after.port == before.port and after.password != before.password
    assert stat.S_IMODE(embedded.password_path(home).stat().st_mode) == 0o600
    assert authentication.trusting_lines((home / "pg" / "pg_hba.conf").read_text()) == []
    assert "no password supplied" in refused(passwordless)
    if ROOT:
        shut_out = as_nobody(passwordless)
        assert shut_out.returncode != 0 and "no password supplied" in shut_out.stderr, shut_out.stdout
    with connect(after.url()) as conn:
        assert conn.execute("SELECT count(*), sum(n) FROM kept").fetchone() == (500, 125250)
    # Once moved, it stays so across a restart.
    assert embedded.stop(home)
    again = embedded.acquire(home)
    assert again.password == after.password
    assert "no password supplied" in refused(passwordless)


def test_a_url_without_the_password_that_names_the_home_s_server_is_given_it(home: Path) -> None:
    """As a process given `TICKETIQ_DATABASE_URL` by hand, or by a release before passwords: it is one of
    the server's users, and reaches it with the home's password."""
    server = embedded.acquire(home, keep=True)
    given = without_password(server.url("postgres"))
    target = resolve(Settings(home=home, database_url=given))
    try:
        assert target.server == server
        assert authentication.password_of(target.url) == server.password
        with connect(target.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        target.release()
    other = resolve(Settings(home=home, database_url="postgresql://postgres@db.internal:5432/ticketiq"))
    assert other.server is None and authentication.password_of(other.url) is None  # not ours to give


def test_a_lost_password_file_is_a_clear_refusal_not_a_new_password(home: Path) -> None:
    server = embedded.acquire(home, keep=True)
    assert embedded.stop(home)
    embedded.password_path(home).unlink()
    with pytest.raises(StorageError) as caught:
        embedded.acquire(home)
    assert "pg.password" in str(caught.value) and "put it back" in str(caught.value)
    assert not embedded.password_path(home).exists()  # no new password the server would not know
    assert embedded.state(home) is ServerState.GONE
    embedded.password_path(home).write_text(server.password + "\n")
    embedded.password_path(home).chmod(0o600)
    assert embedded.acquire(home).password == server.password
