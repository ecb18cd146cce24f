"""The bounds every database connection carries, and the liveness heartbeat's: decisions on plain data."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from ticketiq.leader.liveness import heartbeat_within
from ticketiq.settings import Settings
from ticketiq.storage.database import ConnectionLimits

DEFAULTS = ConnectionLimits.from_settings(Settings())


def test_the_limits_come_from_the_settings() -> None:
    limits = ConnectionLimits.from_settings(
        Settings(db_connect_timeout_s=3.0, db_statement_timeout_s=9.0, db_keepalive_s=4.0)
    )
    assert limits == ConnectionLimits(connect_timeout_s=3.0, statement_timeout_s=9.0, keepalive_s=4.0)


def test_every_connection_opens_in_time_probes_a_silent_peer_and_bounds_its_statements() -> None:
    assert DEFAULTS.parameters() == {
        "connect_timeout": "5",
        "keepalives": "1",
        "keepalives_idle": "5",
        "keepalives_interval": "3",
        "keepalives_count": "4",
        "tcp_user_timeout": "17000",  # as long as the keepalives take to give up: idle 5 + 4 probes x 3
        "options": "-c statement_timeout=15000 -c idle_in_transaction_session_timeout=15000",
    }


def test_libpq_counts_whole_seconds_and_never_fewer_than_two() -> None:
    assert ConnectionLimits(0.5, 15.0, 5.0).parameters()["connect_timeout"] == "2"
    assert ConnectionLimits(2.5, 15.0, 5.0).parameters()["connect_timeout"] == "3"
    assert ConnectionLimits(0.5, 15.0, 5.0).connect_within_s == 3.0  # libpq's 2 s and a margin


def test_a_zero_turns_its_bound_off() -> None:
    limits = ConnectionLimits(0.0, 0.0, 0.0)
    params = limits.parameters()
    assert "connect_timeout" not in params
    assert params["keepalives"] == "0" and "tcp_user_timeout" not in params
    assert "statement_timeout=0 " in params["options"]
    assert limits.connect_within_s is None and limits.answer_within_s is None
    assert limits.pool_wait_s == 30.0  # psycopg_pool's own default


def test_the_client_gives_up_a_margin_after_the_server_would_cancel() -> None:
    assert DEFAULTS.answer_within_s == 16.0
    # A statement waits for a pooled connection as long as opening one and one statement may take.
    assert DEFAULTS.pool_wait_s == 6.0 + 16.0


def test_the_url_keeps_what_it_says_and_its_own_options_come_first() -> None:
    url = "postgresql://app:secret@db.example:6543/tiq?options=-c%20search_path%3Dtiq&sslmode=require"
    params = conninfo_to_dict(DEFAULTS.conninfo(url))
    assert (params["host"], params["port"], params["dbname"]) == ("db.example", "6543", "tiq")
    assert (params["user"], params["password"], params["sslmode"]) == ("app", "secret", "require")
    assert params["options"] == "-c search_path=tiq " + DEFAULTS.parameters()["options"]
    assert params["keepalives_idle"] == "5"


def test_a_heartbeat_may_take_a_few_polls_and_never_under_a_second() -> None:
    assert heartbeat_within(0.25) == 1.0
    assert heartbeat_within(0.1) == 1.0
    assert heartbeat_within(0.5) == 2.0
