"""`GET /v1/processes` with real `ticketiq serve` processes: the live ones, with what each holds and
which leads, and how the others ended: one stopped cleanly (SIGTERM), one SIGKILLed (died), one
SIGSTOPped past its leases, then woken (stalled: it stops itself at its first statement)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.cluster import App, Cluster, create_token
from tests.support.http import web
from ticketiq.runtime import release
from ticketiq.runtime.stall import EXIT_STALLED

# Short leases: the stalled process's lease lapses (and it is found stalled) in seconds.
TTL_S, RENEW_S = 4.0, 1.0


@pytest.fixture
def slow_cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster("--model-latency-ms", "1500")


def shown(cluster: Cluster, app: App, token: str) -> dict[str, Any]:
    response = web.get(f"{app.base}/v1/processes", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def by_pid(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {int(r["pid"]): r for r in rows}


@pytest.mark.long
def test_processes_show_the_live_ones_what_they_hold_and_how_the_others_ended(slow_cluster: Cluster) -> None:
    cluster = slow_cluster
    operator = create_token(cluster.env, "oncall", "operator")
    caller = create_token(cluster.env, "someone", "caller")
    leader = cluster.app("leader", lead=True, lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    killed = cluster.app("killed", lead=False, lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    stalled = cluster.app("stalled", lead=False, lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    quitter = cluster.app("quitter", lead=False, lease_ttl_s=TTL_S, lease_renew_s=RENEW_S)
    on_killed = cluster.post_run(killed, "triage", "Triage OPS-901: killed")
    on_stalled = cluster.post_run(stalled, "triage", "Triage OPS-902: stalled")
    cluster.wait_until(lambda: min(cluster.run(r)["step"] for r in (on_killed, on_stalled)) >= 1, 60, "both runs going")

    refused = web.get(f"{leader.base}/v1/processes", headers={"Authorization": f"Bearer {caller}"}, timeout=30)
    assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == ["header", "Authorization"]
    live = by_pid(shown(cluster, quitter, operator)["processes"])
    assert set(live) == {leader.pid, killed.pid, stalled.pid, quitter.pid}
    assert [pid for pid, p in live.items() if p["leader"]] == [leader.pid]
    assert all(p["alive"] and not p["draining"] and p["host"] for p in live.values())
    assert live[killed.pid]["runs"] == [on_killed] and live[stalled.pid]["runs"] == [on_stalled]
    assert live[quitter.pid]["runs"] == [] and live[quitter.pid]["jobs"] == []
    # Each says the release it runs, as its /readyz does: this checkout's version and commit.
    running = release.current()
    assert running.version != release.UNKNOWN and running.commit != release.UNKNOWN
    assert {(p["version"], p["commit"]) for p in live.values()} == {(running.version, running.commit)}
    ready = web.get(f"{leader.base}/readyz", timeout=30).json()
    assert (ready["version"], ready["commit"]) == (running.version, running.commit)

    quitter.child.stop()  # SIGTERM: a clean stop
    os.kill(killed.pid, signal.SIGKILL)
    os.kill(stalled.pid, signal.SIGSTOP)
    # Its lease lapses and is taken while it still holds its liveness mark: found stalled, still listed.
    cluster.wait_until(lambda: cluster.run(on_stalled)["losses"] == 1, 60, "the stalled process's run taken")
    cluster.wait_until(lambda: by_pid(shown(cluster, leader, operator)["processes"]).get(stalled.pid, {})
                       .get("stalled_at") is not None, 30, "the stall recorded")  # fmt: skip
    assert by_pid(shown(cluster, leader, operator)["processes"])[stalled.pid]["alive"] is True
    os.kill(stalled.pid, signal.SIGCONT)
    assert stalled.child.proc.wait(30) == EXIT_STALLED  # it stopped itself at its first statement
    ended: dict[int, dict[str, Any]] = {}

    def all_ended() -> bool:
        ended.update(by_pid(shown(cluster, leader, operator)["ended"]))
        return {killed.pid, stalled.pid, quitter.pid} <= set(ended)

    cluster.wait_until(all_ended, 30, "the three processes listed as ended")
    assert {pid: ended[pid]["how"] for pid in (killed.pid, stalled.pid, quitter.pid)} == {
        killed.pid: "died", stalled.pid: "stalled", quitter.pid: "stopped"}  # fmt: skip
    assert all(ended[pid]["ended_at"] >= ended[pid]["started_at"] for pid in ended)
    assert {ended[pid]["version"] for pid in (killed.pid, stalled.pid, quitter.pid)} == {running.version}
    now = shown(cluster, leader, operator)
    assert [p["pid"] for p in now["processes"]] == [leader.pid]
    for run_id in (on_killed, on_stalled):
        assert cluster.wait_run(run_id)["status"] == "succeeded"
