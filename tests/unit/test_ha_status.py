"""What `ticketiq db ha status` shows (the table and the verdict line, and its JSON), and what `db ha up`
says on a machine without pg_auto_failover: a one-line reason naming `make pg-auto-failover`, exit code 2,
no traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ticketiq.cli import main as cli
from ticketiq.cli.ha import status_text
from ticketiq.dbserver.formation import Node, Process, Status, Synchrony, Verdict
from ticketiq.dbserver.formation import processes as formation_processes
from ticketiq.dbserver.formation.synchrony import NodeState, NodeView, verdict
from ticketiq.errors import RequestError
from ticketiq.operate.cluster import run_cluster
from ticketiq.settings import Settings

URL = "postgresql://postgres@127.0.0.1:21001,127.0.0.1:21002/ticketiq?target_session_attrs=read-write"


def _node(name: str, port: int, state: NodeState | None, process: Process = Process.RUNNING) -> Node:
    pids = (100 + port % 100, 200 + port % 100) if process is not Process.GONE else ()
    return Node(name, port, Path(f"/h/ha/{name}"), process, pids[0] if pids else None, pids[1] if pids else None,
                pids, state, 0 if state else None)  # fmt: skip


def _state(name: str, reported: str, assigned: str, replication: str = "unknown") -> NodeState:
    return NodeState(int(name[-1]), name, 21000 + int(name[-1]), reported, assigned, 1, True, replication,
                     "0/3000110", 1, 0.3)  # fmt: skip


def _status(*nodes: Node, found: Verdict | None, error: str | None = None) -> Status:
    return Status(URL, _node("monitor", 21000, None), nodes, found, monitor_error=error, number_sync_standbys=0)


def test_both_nodes_up_shows_roles_and_that_commits_wait_for_the_standby() -> None:
    nodes = (_node("node1", 21001, _state("node1", "primary", "primary", "quorum")),
             _node("node2", 21002, _state("node2", "secondary", "secondary")))  # fmt: skip
    text = status_text(_status(*nodes, found=verdict([_view(n) for n in nodes])))
    lines = text.splitlines()
    assert lines[0].split() == ["NODE", "PORT", "PROCESS", "KEEPER", "POSTMASTER", "REPORTED", "ASSIGNED", "HEALTH",
                                "WAL", "BEHIND"]  # fmt: skip
    assert lines[2].split()[:8] == ["node1", "21001", "running", "101", "201", "primary", "primary", "good"]
    assert lines[3].split()[5:7] == ["secondary", "secondary"]
    assert "synchronous: commits wait for the standby (node2 is a quorum standby)" in lines
    assert lines[-1] == f"url  {URL}"


def test_the_standby_gone_shows_one_copy() -> None:
    nodes = (_node("node1", 21001, _state("node1", "primary", "demoted", "quorum"), Process.GONE),
             _node("node2", 21002, _state("node2", "wait_primary", "wait_primary")))  # fmt: skip
    found = verdict([_view(n) for n in nodes])
    assert found.synchrony is Synchrony.ONE_COPY
    text = status_text(_status(*nodes, found=found))
    assert "ONE COPY: commits are acknowledged by the primary alone until the standby returns" in text
    assert "node1    21001  gone     -" in text


def test_a_formation_whose_monitor_does_not_answer_is_shown_down() -> None:
    nodes = (_node("node1", 21001, None, Process.GONE), _node("node2", 21002, None, Process.GONE))
    down = _status(*nodes, found=None, error="the monitor on port 21000 does not answer (refused)")
    assert not down.up
    assert "DOWN: the monitor on port 21000 does not answer (refused); `ticketiq db ha up` starts it" in status_text(
        down
    )
    assert down.to_json()["up"] is False and down.to_json()["synchrony"] is None


def test_the_json_names_the_verdict_the_primary_and_every_pid() -> None:
    nodes = (_node("node1", 21001, _state("node1", "primary", "primary", "sync")),
             _node("node2", 21002, _state("node2", "secondary", "secondary")))  # fmt: skip
    shown = _status(*nodes, found=verdict([_view(n) for n in nodes])).to_json()
    assert (shown["synchrony"], shown["primary"], shown["standby"]) == ("synchronous", "node1", "node2")
    assert [n["reported"] for n in shown["nodes"]] == ["primary", "secondary"]
    assert shown["nodes"][0]["pids"] == [101, 201] and shown["monitor"]["port"] == 21000


def _view(node: Node) -> NodeView:
    assert node.state is not None
    return NodeView(node.state, node.process)


@pytest.fixture
def kept_logging() -> Iterator[None]:
    """`cli.main` configures the root logger for a process; the test's process gets its own back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.usefixtures("kept_logging")
def test_up_without_pg_auto_failover_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no pg_autoctl on it
    monkeypatch.setattr(formation_processes, "DEBIAN_PATH", str(tmp_path / "no-pg_autoctl"))
    monkeypatch.setenv("TICKETIQ_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TICKETIQ_DATABASE_URL", raising=False)
    assert cli.main(["db", "ha", "up"]) == 2
    out, err = capsys.readouterr()
    assert "make pg-auto-failover" in err and "Traceback" not in err + out
    assert err.count("\n") == 1
    assert not (tmp_path / "home" / "ha").exists()  # nothing was made


@pytest.mark.usefixtures("kept_logging")
def test_status_without_a_formation_exits_nonzero_and_says_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TICKETIQ_HOME", str(tmp_path / "home"))
    assert cli.main(["db", "ha", "status"]) == 1
    assert "`ticketiq db ha up` makes one" in capsys.readouterr().err
    assert cli.main(["db", "ha", "status", "--json"]) == 1
    assert '"up": false' in capsys.readouterr().out


def test_a_cluster_on_the_formation_refuses_a_database_url_as_well() -> None:
    settings = Settings(database_url="postgresql://postgres@127.0.0.1:5432/ticketiq")
    with pytest.raises(RequestError, match="unset TICKETIQ_DATABASE_URL"):
        run_cluster(settings, 2, 8080, db="ha")
