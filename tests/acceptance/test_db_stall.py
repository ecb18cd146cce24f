"""A process whose database stalls, with real `ticketiq serve` processes: every connection of the victim
goes through a TCP proxy the test pauses for longer than the lease TTL while it drives a run. The
victim's connections hang (no error, no answer); its bounded heartbeat sees its liveness lost, so it
sends and writes nothing more, steps down, and comes back under a new identity once the database
answers again. The survivor claims the run once when its lease lapses and finishes it."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.acceptance.test_crash_resume import triage_writes_once
from tests.support.cluster import Cluster
from tests.support.http import web
from tests.support.tcp_proxy import threaded_proxy

TTL_S = 8.0  # TICKETIQ_LEASE_TTL_S's default, which the processes run with


def holds(cluster: Cluster, lease: str, pid: int) -> bool:
    rows = cluster.rows("SELECT holder FROM leases WHERE name = %s", lease)
    return bool(rows) and f":{pid}:" in rows[0]["holder"]


def rows(cluster: Cluster, sql: str, **params: Any) -> list[dict[str, Any]]:
    """A query with named parameters, on a connection of its own."""
    with psycopg.connect(cluster.db_url, autocommit=True, row_factory=dict_row) as conn:
        return conn.execute(sql, params).fetchall()


def db_now(cluster: Cluster) -> datetime:
    now: datetime = cluster.rows("SELECT now() AS now")[0]["now"]
    return now


@pytest.mark.long
def test_a_process_whose_database_stalls_writes_nothing_more_steps_down_and_comes_back_as_a_new_identity(
    make_cluster: Callable[..., Cluster], db_url: str
) -> None:
    cluster = make_cluster("--model-latency-ms", "1500")  # the run lasts past the stall's start
    with threaded_proxy(db_url) as proxy:
        victim = cluster.app("victim", lead=True, database_url=proxy.url)
        cluster.wait_until(lambda: holds(cluster, "leader", victim.pid), 30, "the victim leading")
        survivor = cluster.app("survivor", lead=True)  # connected directly
        run_id = cluster.post_run(victim, "triage", "Triage OPS-901: the database stalls")
        lease = f"checkpoint:{run_id}"
        cluster.wait_until(lambda: cluster.run(run_id)["step"] >= 1, 30, "the first step")
        assert holds(cluster, lease, victim.pid)
        proxy.pause()
        paused = time.monotonic()
        # A statement the server had already received before the pause may still land; anything the
        # victim sent after it waits in the proxy.
        time.sleep(0.5)
        stalled_at = db_now(cluster)
        # Stalled, the victim answers its readiness probe, and with 503, not a hang.
        ready = web.get(f"{victim.base}/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        # Its mark still looks held (its connection hangs, it did not close), so the lease is waited out.
        cluster.wait_until(lambda: holds(cluster, lease, survivor.pid), 60, "the survivor claiming the run")
        claimed_at = cluster.rows("SELECT acquired_at FROM leases WHERE name = %s", lease)[0]["acquired_at"]
        time.sleep(max(0.0, TTL_S + 1.0 - (time.monotonic() - paused)))  # stalled longer than the TTL
        proxy.resume()
        run = cluster.wait_run(run_id, timeout_s=60)
        cluster.wait_until(
            lambda: len(cluster.rows("SELECT id FROM processes WHERE pid = %s", victim.pid)) >= 2, 60,
            "the victim back under a new identity",
        )  # fmt: skip
        cluster.wait_until(lambda: web.get(f"{victim.base}/readyz", timeout=10).status_code == 200, 30,
                           "the victim ready again")  # fmt: skip
        before = touched(cluster, run_id)
        time.sleep(2.0)  # whatever the victim sent during the stall has reached the server by now
        assert touched(cluster, run_id) == before
        victim_log = victim.child.log_tail(200_000)
        victim.child.stop()
    assert run["status"] == "succeeded", cluster.logs()
    assert (run["attempt"], run["losses"]) == (2, 1)  # claimed once
    triage_writes_once(cluster, 901)
    # Nothing reached the vendors or the database from the stall's start until the survivor held the run,
    # and the survivor alone wrote about it from then on (the victim's attempt was fenced off).
    window = rows(
        cluster,
        "SELECT 'transcript' AS what, at FROM transcripts WHERE run_id = %(run)s AND at >= %(from)s AND at < %(to)s "
        "UNION ALL SELECT 'call', updated_at FROM calls WHERE run_id = %(run)s "
        "  AND ((created_at >= %(from)s AND created_at < %(to)s) OR (updated_at >= %(from)s AND updated_at < %(to)s)) "
        "UNION ALL SELECT 'checkpoint', written_at FROM checkpoints "
        "  WHERE run_id = %(run)s AND written_at >= %(from)s AND written_at < %(to)s "
        "UNION ALL SELECT 'audit', at FROM audit_log WHERE run_id = %(run)s AND at >= %(from)s AND at < %(to)s "
        "UNION ALL SELECT 'vendor write', received_at FROM standin.writes "
        "  WHERE received_at >= %(from)s AND received_at < %(to)s",
        **{"run": run_id, "from": stalled_at, "to": claimed_at},
    )
    assert window == []
    [first] = cluster.rows("SELECT min(received_at) AS at FROM standin.writes WHERE received_at >= %s", stalled_at)
    assert first["at"] is not None and first["at"] >= claimed_at  # every triage write came after the claim
    attempts = cluster.rows(
        "SELECT DISTINCT attempt FROM calls WHERE run_id = %s AND (created_at >= %s OR updated_at >= %s)",
        run_id, stalled_at, stalled_at,
    )  # fmt: skip
    assert attempts == [{"attempt": 2}]
    actors = {r["actor"] for r in cluster.rows("SELECT actor FROM audit_log WHERE run_id = %s AND at >= %s",
                                               run_id, stalled_at)}  # fmt: skip
    assert actors and all(f":{survivor.pid}:" in actor for actor in actors), actors
    # It stepped down (the survivor leads now) and came back under a fresh identity, the old one found dead.
    assert holds(cluster, "leader", survivor.pid)
    assert "no longer leads" in victim_log and "continues as" in victim_log
    lives = cluster.rows("SELECT id, ended_at FROM processes WHERE pid = %s ORDER BY started_at", victim.pid)
    assert len({life["id"] for life in lives}) == len(lives) >= 2
    assert lives[0]["ended_at"] is not None


def touched(cluster: Cluster, run_id: str) -> dict[str, object]:
    """What a process could have written about the run, and the vendors' records."""
    return rows(
        cluster,
        "SELECT (SELECT count(*) FROM transcripts WHERE run_id = %(run)s) AS transcripts, "
        "(SELECT count(*) FROM calls WHERE run_id = %(run)s) AS calls, "
        "(SELECT max(updated_at) FROM calls WHERE run_id = %(run)s) AS call_update, "
        "(SELECT count(*) FROM audit_log WHERE run_id = %(run)s) AS audit, "
        "(SELECT written_at FROM checkpoints WHERE run_id = %(run)s) AS checkpoint, "
        "(SELECT count(*) FROM standin.writes) AS vendor_writes",
        run=run_id,
    )[0]
