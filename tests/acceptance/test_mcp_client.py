"""The sample's `noter` agent on a real `ticketiq serve` against the stand-ins' MCP server (issue 33): each
call reaches the server named by its process (the User-Agent carries the pid), as every other vendor call
does, so the kill trials' stop mode can tell that a resumed process called no MCP tool."""

from __future__ import annotations

from tests.support.cluster import Cluster


def test_a_processs_mcp_calls_carry_its_pid_to_the_server(cluster: Cluster) -> None:
    app = cluster.app("noter", lead=True)
    run_id = cluster.post_run(app, "noter", "Note OPS-9001: checkout is failing")
    row = cluster.wait_run(run_id)
    assert row["status"] == "succeeded", cluster.logs()
    calls = cluster.rows("SELECT operation, target, client FROM standin.writes WHERE vendor = 'mcp' ORDER BY id")
    assert [(c["operation"], c["target"]) for c in calls] == [
        ("add_note", "OPS-9001"), ("set_note", "OPS-9001-status"), ("get_note", "OPS-9001-status"),
    ]  # fmt: skip
    assert [f"pid/{app.pid} " in f"{c['client']} " for c in calls] == [True, True, True], calls
