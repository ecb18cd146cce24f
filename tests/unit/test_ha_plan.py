"""The HA formation's plan, with no process and no database: its ports, the URLs it hands out (read back
by psycopg's own parser), its server settings and keeper timeouts as the issue tunes them, the commands
that make it, and what pg_autoctl's pid file says."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from ticketiq.dbserver.authentication import trusting_lines, without_trust
from ticketiq.dbserver.formation.plan import (
    HBA_TEXT,
    KEEPER_TIMEOUTS,
    MONITOR_ROLES,
    MONITOR_SETTINGS,
    NODE_ROLES,
    NODE_SETTINGS,
    FormationError,
    Keeper,
    KeeperPidfile,
    Layout,
    Plan,
    choose_ports,
    config_set_commands,
    create_monitor_command,
    create_node_command,
    monitor_url,
    multi_host_url,
    new_plan,
    parse_keeper_pidfile,
    passfile_text,
    password_in,
    postgres_bin_dir,
    settings_text,
    socket_dir,
    with_include,
)

LAYOUT = Layout(Path("/srv/tq/ha"))
PG_CTL = Path("/usr/lib/postgresql/15/bin/pg_ctl")


def test_ports_are_the_first_free_distinct_candidates() -> None:
    taken = {20001, 20003}
    assert choose_ports(3, [20001, 20002, 20002, 20003, 20004, 20005], lambda p: p not in taken) == (
        20002,
        20004,
        20005,
    )


def test_too_few_free_ports_is_an_error_that_says_so() -> None:
    with pytest.raises(FormationError, match="found 1 free ports of the 3"):
        choose_ports(3, [1, 2, 3], lambda p: p == 2)


def test_the_plan_keeps_its_ports_and_keepers_across_the_state_file() -> None:
    plan = new_plan("ticketiq-pg", (21000, 21001, 21002)).with_keeper("node1", Keeper(4242, 1700000000.25))
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert again.ports == {"monitor": 21000, "node1": 21001, "node2": 21002}
    assert again.with_keeper("node1", None).keepers == {}


@pytest.mark.parametrize(
    "text",
    ["", "{}", '{"version": 2}', "[1]", '{"version": 1, "user": null, "monitor_port": 1, "node_ports": {"a": 2}, '
     '"keepers": {}}'],
)  # fmt: skip
def test_a_state_file_this_version_cannot_read_is_refused_with_a_reason(text: str) -> None:
    with pytest.raises(FormationError, match="state file is unreadable"):
        Plan.from_json(text)


def test_the_url_names_both_nodes_and_asks_for_the_one_that_takes_writes() -> None:
    url = multi_host_url([21001, 21002], "pw-of-the-formation")
    assert url == (
        "postgresql://postgres:pw-of-the-formation@127.0.0.1:21001,127.0.0.1:21002/ticketiq"
        "?target_session_attrs=read-write"
    )
    params = conninfo_to_dict(url)  # what libpq will try, host by host
    assert params["host"] == "127.0.0.1,127.0.0.1"
    assert params["port"] == "21001,21002"
    assert params["dbname"] == "ticketiq"
    assert params["user"] == "postgres"
    assert params["password"] == "pw-of-the-formation"
    assert params["target_session_attrs"] == "read-write"
    # A formation made before passwords (it trusts until its next `up`) is reached without one.
    assert "password" not in conninfo_to_dict(multi_host_url([21001, 21002], None))
    assert conninfo_to_dict(monitor_url(21000, "pw"))["password"] == "pw"


def test_the_passfile_gives_each_role_that_connects_over_tcp_the_formation_s_password() -> None:
    text = passfile_text("s3cret-pw")
    assert password_in(text) == "s3cret-pw"
    assert sorted(line.rsplit(":", 2)[1] for line in text.splitlines()) == sorted((*MONITOR_ROLES, *NODE_ROLES))
    assert all(line.startswith("*:*:*:") and line.endswith(":s3cret-pw") for line in text.splitlines())
    assert password_in("") is None and password_in("# nothing\n") is None


def test_every_server_asks_for_the_password_over_tcp_and_refuses_the_health_check_role() -> None:
    """pg_hba.conf as `up` writes it on the monitor and both nodes: nothing over TCP is trusted (what trusts
    is the Unix socket, in a folder only the formation's user reaches), the health-check role (whose
    password pg_auto_failover publishes) is refused before the line that would take its password, and a
    line pg_autoctl appends later (trust) never comes first."""
    trusting = trusting_lines(HBA_TEXT)
    assert trusting and all(line.startswith("local") for line in trusting)
    rules = [line.split() for line in HBA_TEXT.splitlines() if line and not line.startswith("#")]
    host = [r for r in rules if r[0] == "host"]
    assert all(r[3] == "127.0.0.1/32" and r[4] in ("scram-sha-256", "reject") for r in host)
    assert host[0][2] == "pgautofailover_monitor" and host[0][4] == "reject"
    assert {(r[1], r[4]) for r in host[1:]} == {("all", "scram-sha-256"), ("replication", "scram-sha-256")}
    assert trusting_lines(without_trust(HBA_TEXT)) == []


def _megabytes(value: str) -> int:
    assert value.endswith("MB"), value
    return int(value[:-2])


def test_memory_is_sized_for_a_small_machine_and_connections_for_the_apps_and_tests() -> None:
    assert 32 <= _megabytes(NODE_SETTINGS["shared_buffers"]) <= 64
    assert _megabytes(NODE_SETTINGS["work_mem"]) <= 8
    assert 80 <= int(NODE_SETTINGS["max_connections"]) <= 150
    assert _megabytes(MONITOR_SETTINGS["shared_buffers"]) <= 64


def test_the_monitor_checks_every_second_and_fails_over_within_seconds() -> None:
    assert MONITOR_SETTINGS["pgautofailover.health_check_period"] == "1000"
    assert MONITOR_SETTINGS["pgautofailover.node_considered_unhealthy_timeout"] == "3000"
    assert MONITOR_SETTINGS["pgautofailover.primary_demote_timeout"] == "6000"
    assert int(MONITOR_SETTINGS["pgautofailover.health_check_timeout"]) <= 1000
    assert int(MONITOR_SETTINGS["pgautofailover.health_check_max_retries"]) <= 2
    assert int(MONITOR_SETTINGS["pgautofailover.health_check_retry_delay"]) <= 1000


def test_each_keeper_gets_the_tuned_timeouts_by_config_set() -> None:
    commands = config_set_commands(LAYOUT, "node2")
    set_to = {c[5]: c[6] for c in commands}
    assert set_to["timeout.network_partition_timeout"] == "3"
    assert set_to["timeout.prepare_promotion_walreceiver"] == "1"
    assert set_to == dict(KEEPER_TIMEOUTS)
    assert all(c[:5] == ["pg_autoctl", "config", "set", "--pgdata", "/srv/tq/ha/node2"] for c in commands)


def test_our_settings_file_is_included_last_and_once() -> None:
    conf = "include 'postgresql-auto-failover.conf' # Auto-generated by pg_auto_failover\nport = 5432\n"
    included = with_include(conf)
    assert included is not None
    assert included.splitlines()[-1].startswith("include 'ticketiq.conf'")
    assert included.startswith(conf)
    assert with_include(included) is None
    text = settings_text({"shared_buffers": "48MB", "pgautofailover.health_check_period": "1000"})
    assert "shared_buffers = '48MB'" in text.splitlines()
    assert "pgautofailover.health_check_period = '1000'" in text.splitlines()


def _options(command: list[str]) -> dict[str, str]:
    """--option value pairs (a flag without a value maps to the next option's name, never read here)."""
    return {a: b for a, b in itertools.pairwise(command) if a.startswith("--")}


def test_the_commands_make_a_local_formation_reached_on_127_0_0_1_only() -> None:
    mon = create_monitor_command(LAYOUT, PG_CTL, 21000)
    node = create_node_command(LAYOUT, PG_CTL, "node1", 21001, 21000)
    for command in (mon, node):
        opts = _options(command)
        assert opts["--listen"] == opts["--hostname"] == "127.0.0.1"
        assert "--no-ssl" in command and opts["--auth"] == "scram-sha-256"
        assert opts["--pgctl"] == str(PG_CTL)
    assert mon[:5] == ["pg_autoctl", "create", "monitor", "--pgdata", "/srv/tq/ha/monitor"]
    assert _options(mon)["--pgport"] == "21000"
    opts = _options(node)
    assert opts["--pgport"] == "21001" and opts["--name"] == "node1" and opts["--dbname"] == "ticketiq"
    assert opts["--username"] == "postgres"
    # No password on a command line (any user reads it) nor in pg_autoctl's configuration: the passfile has it.
    assert opts["--monitor"] == "postgresql://autoctl_node@127.0.0.1:21000/pg_auto_failover?sslmode=disable"
    assert opts["--replication-quorum"] == "true"


def test_pg_autoctl_files_live_under_the_formation_folder_named_after_the_data_folder() -> None:
    assert LAYOUT.keeper_file("node1", "pid") == Path(
        "/srv/tq/ha/xdg/node1/run/pg_autoctl/srv/tq/ha/node1/pg_autoctl.pid"
    )
    assert LAYOUT.keeper_file("node2", "cfg") == Path(
        "/srv/tq/ha/xdg/node2/config/pg_autoctl/srv/tq/ha/node2/pg_autoctl.cfg"
    )
    assert LAYOUT.keeper_file("node2", "init").parent == LAYOUT.keeper_file("node2", "state").parent
    env = LAYOUT.environment("node2", Path("/usr/lib/postgresql/15/bin"), "C.UTF-8")
    assert env["PG_REGRESS_SOCK_DIR"] == env["PGHOST"] == "/srv/tq/ha/sockets"
    assert env["PATH"].startswith("/usr/lib/postgresql/15/bin:")
    assert not any(k in env for k in ("PGPORT", "PGUSER", "PGDATABASE", "PGPASSWORD"))
    assert env["PGPASSFILE"] == "/srv/tq/ha/pgpass" == str(LAYOUT.passfile)
    # Each node's own runtime folder: its processes are known by it in their environment.
    runtime = {LAYOUT.environment(name, Path("/b"), "C")["XDG_RUNTIME_DIR"] for name in ("monitor", "node1", "node2")}
    assert len(runtime) == 3


def test_a_socket_folder_too_deep_for_a_unix_socket_moves_to_tmp() -> None:
    assert socket_dir(Path("/srv/tq/ha")) == Path("/srv/tq/ha/sockets")
    deep = Path("/tmp/" + "d" * 100) / "ha"
    moved = socket_dir(deep)
    assert moved.parent == Path("/tmp") and moved.name.startswith("ticketiq-ha-")
    assert len(str(moved / ".s.PGSQL.65535")) <= 107
    assert socket_dir(deep) == moved  # the same folder at every start


def test_pg_autoctls_pid_file_names_its_run_process_and_services() -> None:
    text = "2406\n/tmp/h/node1\n2.0\n2.0\n19\n2410 postgres\n2411 node-active\n"
    assert parse_keeper_pidfile(text) == KeeperPidfile(2406, "/tmp/h/node1", {"postgres": 2410, "node-active": 2411})
    assert parse_keeper_pidfile("") is None
    assert parse_keeper_pidfile("x\n") is None


def test_the_newest_postgres_with_the_extension_is_chosen() -> None:
    found = [Path("/usr/lib/postgresql/13/lib/pgautofailover.so"), Path("/usr/lib/postgresql/15/lib/pgautofailover.so")]
    assert postgres_bin_dir(found) == Path("/usr/lib/postgresql/15/bin")
    assert postgres_bin_dir([]) is None
