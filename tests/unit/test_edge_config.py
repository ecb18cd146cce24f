"""The edge's HAProxy configuration, read back as HAProxy reads it: sections of directives. Which
requests it retries is evaluated from its own ACL and rule, not searched for as text. Also the pure
decisions of `ticketiq cluster`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ticketiq.dbserver.authentication import without_password
from ticketiq.errors import ConfigError, RequestError
from ticketiq.operate.cluster import Exited, admin_socket_path, app_names, last_roll, stop_reason
from ticketiq.operate.edge import Backend, haproxy_binary, haproxy_config
from ticketiq.operate.edge_admin import current_sessions, refused
from ticketiq.operate.slots import how_it_ended

BACKENDS = (Backend("app1", "127.0.0.1", 8081), Backend("app2", "127.0.0.1", 8082))
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


def sections(text: str) -> dict[str, list[list[str]]]:
    """`global`, `defaults`, `frontend edge`, `backend app`: each section's directives as words,
    comments and blank lines dropped."""
    found: dict[str, list[list[str]]] = {}
    current = ""
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = line.strip()
            found[current] = []
        else:
            found[current].append(line.split())
    return found


def directive(section: list[list[str]], *head: str) -> list[list[str]]:
    """The directives of the section that start with these words."""
    return [words for words in section if tuple(words[: len(head)]) == head]


def one(section: list[list[str]], *head: str) -> list[str]:
    matches = directive(section, *head)
    assert len(matches) == 1, f"{' '.join(head)}: {matches}"
    return matches[0]


def milliseconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(us|ms|s|m|h)?", value)
    assert match is not None, value
    number, unit = match.groups()
    return float(number) * {"us": 0.001, "ms": 1, None: 1, "s": 1000, "m": 60_000, "h": 3_600_000}[unit]


def l7_retry_allowed(backend: list[list[str]], method: str) -> bool:
    """Whether a request with this method may be retried after it was sent (empty-response,
    response-timeout), by the backend's `http-request disable-l7-retry` rules and the method ACLs
    they name."""
    acls = {words[1]: set(words[3:]) for words in directive(backend, "acl") if words[2] == "method"}
    for rule in directive(backend, "http-request", "disable-l7-retry"):
        if len(rule) == 2:
            return False
        condition, name = rule[2], rule[3]
        matches = method in acls[name]
        if (condition == "if") == matches:
            return False
    return True


@pytest.fixture
def config() -> dict[str, list[list[str]]]:
    return sections(haproxy_config(8080, BACKENDS, check_interval_ms=150))


def test_it_is_http_with_a_frontend_on_the_port_and_one_backend(config: dict[str, list[list[str]]]) -> None:
    assert set(config) == {"global", "defaults", "frontend edge", "backend app"}
    assert one(config["defaults"], "mode") == ["mode", "http"]
    assert one(config["frontend edge"], "bind") == ["bind", "127.0.0.1:8080"]
    assert one(config["frontend edge"], "default_backend") == ["default_backend", "app"]


def test_a_process_is_in_rotation_only_while_its_readyz_answers_200_checked_every_interval(
    config: dict[str, list[list[str]]],
) -> None:
    backend = config["backend app"]
    assert one(backend, "option", "httpchk") == ["option", "httpchk", "GET", "/readyz"]
    assert one(backend, "http-check", "expect") == ["http-check", "expect", "status", "200"]
    servers = directive(backend, "server")
    assert [s[1:3] for s in servers] == [["app1", "127.0.0.1:8081"], ["app2", "127.0.0.1:8082"]]
    for server in servers:
        params = dict(zip(server[4::2], server[5::2], strict=True))
        assert server[3] == "check"
        assert params["inter"] == "150"
        assert int(params["fall"]) <= 2  # out within two checks of dying
        assert int(params["rise"]) <= 2
    # A check may take as long as /readyz's own bound (1 s), never only the interval.
    assert milliseconds(one(config["defaults"], "timeout", "check")[2]) >= 1000


def test_retries_go_to_another_process_and_only_safe_methods_are_retried_after_they_were_sent(
    config: dict[str, list[list[str]]],
) -> None:
    backend = config["backend app"]
    assert one(backend, "retries") == ["retries", "3"]
    assert one(backend, "option", "redispatch") == ["option", "redispatch", "1"]  # every retry, not the last
    assert one(backend, "retry-on")[1:] == ["conn-failure", "empty-response", "response-timeout"]
    for method in UNSAFE:
        assert not l7_retry_allowed(backend, method), method  # only a connection never made is retried
    for method in ("GET", "HEAD"):
        assert l7_retry_allowed(backend, method), method


def test_each_request_gets_its_own_server_connection_and_sensible_timeouts(
    config: dict[str, list[list[str]]],
) -> None:
    defaults = config["defaults"]
    # No idle server connection is reused: a POST can fail only at connect, before it was sent.
    assert directive(defaults, "option", "http-server-close")
    assert not directive(defaults, "option", "http-keep-alive")
    assert not directive(config["backend app"], "http-reuse")
    timeouts = {words[1]: milliseconds(words[2]) for words in directive(defaults, "timeout")}
    assert timeouts["connect"] <= 1000
    assert timeouts["client"] >= 60_000
    assert timeouts["server"] >= 60_000  # past the co-pilot's 20 s wait
    assert one(config["backend app"], "balance")[1] in ("leastconn", "roundrobin")


def test_an_ipv6_address_is_bracketed() -> None:
    text = haproxy_config(8080, [Backend("app1", "::1", 8081)], host="::1")
    config = sections(text)
    assert one(config["frontend edge"], "bind") == ["bind", "[::1]:8080"]
    assert one(config["backend app"], "server")[2] == "[::1]:8081"


@pytest.mark.parametrize(
    ("port", "backends", "interval", "says"),
    [
        (8080, [], 200, "at least one app process"),
        (0, BACKENDS, 200, "not a TCP port"),
        (8080, [Backend("app 1", "127.0.0.1", 8081)], 200, "cannot name an app process"),
        (8080, [Backend("app1", "127.0.0.1", 70000)], 200, "not a TCP port"),
        (8080, [Backend("app1", "", 8081)], 200, "not a host name"),
        (8080, [BACKENDS[0], BACKENDS[0]], 200, "two app processes are named app1"),
        (8080, BACKENDS, 0, "at least 1 ms"),
    ],
)
def test_input_haproxy_would_refuse_is_refused_with_what_is_wrong(
    port: int, backends: list[Backend], interval: int, says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        haproxy_config(port, backends, check_interval_ms=interval)


def test_haproxy_accepts_the_config_without_a_warning(tmp_path: Path) -> None:
    binary = haproxy_binary()
    if binary is None:
        pytest.skip("haproxy is not installed (`make haproxy` installs it): its own check of the config is skipped")
    path = tmp_path / "haproxy.cfg"
    path.write_text(haproxy_config(18080, BACKENDS))
    checked = subprocess.run([binary, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0, output
    assert "WARNING" not in output and "ALERT" not in output, output


# ----- `ticketiq cluster`'s decisions ----------------------------------------------------------------


def test_the_app_processes_are_app1_to_appn_and_none_is_refused() -> None:
    assert app_names(2) == ["app1", "app2"]
    with pytest.raises(RequestError, match="at least 1, not 0"):
        app_names(0)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://postgres@127.0.0.1:5432/ticketiq", "postgresql://postgres@127.0.0.1:5432/ticketiq"),
        ("postgresql://u:s3cret@db.example:5432/t?sslmode=require", "postgresql://u:***@db.example:5432/t?sslmode=require"),
        ("postgresql://u:p%40ss@h/t", "postgresql://u:***@h/t"),
        ("host=h user=u password=s3cret dbname=t", "host=h user=u password=*** dbname=t"),
        ("host=h password='a b' dbname=t", "host=h password=*** dbname=t"),
    ],
)  # fmt: skip
def test_a_database_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert without_password(url) == shown
    assert "s3cret" not in without_password(url)


def test_how_an_app_process_ended_names_the_signal_or_the_exit_code() -> None:
    assert how_it_ended(-9) == "was killed by SIGKILL"
    assert how_it_ended(3) == "exited with code 3"
    assert how_it_ended(-200) == "was killed by signal 200"


def test_the_cluster_stops_when_nothing_can_be_served() -> None:
    assert stop_reason(1, None, None) is None
    assert stop_reason(0, None, None) == "every app process is left down after a crash loop"
    edge_reason = stop_reason(2, Exited("edge", 7, 1), None)
    assert edge_reason is not None and "edge" in edge_reason
    standins_reason = stop_reason(2, None, Exited("standins", 8, 1))
    assert standins_reason is not None and "stand-ins" in standins_reason


def test_the_edge_sets_x_forwarded_proto_itself_over_what_a_client_sent(config: dict[str, list[list[str]]]) -> None:
    # The console marks its cookie Secure by the scheme; a client must not be able to choose it.
    sets = [d for d in config["frontend edge"] if d[:3] == ["http-request", "set-header", "X-Forwarded-Proto"]]
    assert sets == [
        ["http-request", "set-header", "X-Forwarded-Proto", "https", "if", "{", "ssl_fc", "}"],
        ["http-request", "set-header", "X-Forwarded-Proto", "http", "if", "!{", "ssl_fc", "}"],
    ]


def test_the_runtime_api_is_opened_for_its_owner_only_when_asked(tmp_path: Path) -> None:
    assert directive(sections(haproxy_config(8080, BACKENDS))["global"], "stats") == []
    sock = tmp_path / "haproxy.sock"
    opened = sections(haproxy_config(8080, BACKENDS, admin_socket=sock))["global"]
    assert directive(opened, "stats", "socket") == [["stats", "socket", str(sock), "mode", "600", "level", "admin"]]
    with pytest.raises(ConfigError, match="longer than 97"):
        haproxy_config(8080, BACKENDS, admin_socket=Path("/" + "d" * 100) / "haproxy.sock")


def test_a_deep_logs_folder_puts_the_admin_socket_in_a_folder_of_its_own(tmp_path: Path) -> None:
    assert admin_socket_path(Path("/tmp/x")) == Path("/tmp/x/haproxy.sock")
    deep = admin_socket_path(tmp_path / ("d" * 90))
    try:
        assert len(str(deep)) <= 97 and deep.parent.parent == Path("/tmp")
        assert deep.parent.stat().st_mode & 0o777 == 0o700
    finally:
        deep.parent.rmdir()


def test_the_runtime_api_answers_are_read_for_refusals_and_open_sessions() -> None:
    assert refused("No such server.\n") and refused("Unknown command: 'x'\n") and refused("Invalid state value\n")
    assert not refused("\n") and not refused("IP changed from '127.0.0.1' to '127.0.0.1', port changed from '1' to '2'")
    stat = (
        "# pxname,svname,qcur,qmax,scur,smax,slim\n"
        "edge,FRONTEND,,,3,9,4096\napp,app1,0,0,2,5,\napp,app2,0,0,0,4,\napp,BACKEND,0,0,2,9,\n"
    )
    assert current_sessions(stat, "app1") == 2 and current_sessions(stat, "app2") == 0
    with pytest.raises(Exception, match="no server app/app3"):
        current_sessions(stat, "app3")


def test_the_roll_log_names_its_roll_by_number(tmp_path: Path) -> None:
    log = tmp_path / "cluster.roll"
    assert last_roll(log) == 0
    log.write_text("roll 3\napp1: started pid 1\n")
    assert last_roll(log) == 3
    log.write_text("garbage\n")
    assert last_roll(log) == 0
