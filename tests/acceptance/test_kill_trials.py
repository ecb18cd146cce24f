"""Kill trials: a fresh victim process per round starts triage runs and is SIGKILLed at a random
instant, anywhere from before a run's first step to after its answer; the survivor recovers them.
Judged from the database and the stand-ins: nothing lost, nothing doubled.

One round runs in the normal suite. More are slow (about 6 s a round), so they run only when asked:

    TICKETIQ_KILL_TRIALS=50 .venv/bin/python -m pytest tests/acceptance/test_kill_trials.py -q

`TICKETIQ_KILL_SEED` fixes the kill instants for a repeat run.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest

from tests.acceptance.test_crash_resume import applied
from tests.support.cluster import Cluster

ROUNDS = int(os.environ.get("TICKETIQ_KILL_TRIALS", "1"))
SEED = int(os.environ.get("TICKETIQ_KILL_SEED", str(random.randrange(1 << 30))))
RUNS_PER_ROUND = 3


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster("--model-latency-ms", "400")


def test_random_kills_lose_nothing_and_double_nothing(cluster: Cluster) -> None:
    rng = random.Random(SEED)
    cluster.app("survivor", lead=True)
    recovery: list[float] = []
    ticket = 1000
    for round_no in range(ROUNDS):
        victim = cluster.app(f"victim{round_no}", lead=False)
        tickets = list(range(ticket, ticket + RUNS_PER_ROUND))
        ticket += RUNS_PER_ROUND
        runs = {n: cluster.post_run(victim, "triage", f"Triage OPS-{n}: round {round_no}") for n in tickets}
        time.sleep(rng.uniform(0.05, 2.5))
        victim.child.kill()
        killed = time.monotonic()
        for n, run_id in runs.items():
            run = cluster.wait_run(run_id, timeout_s=60)
            assert run["status"] == "succeeded", (f"seed {SEED} round {round_no}", run, cluster.logs())
            if run["losses"]:
                recovery.append(time.monotonic() - killed)
            # Judged per ticket: one incident, one comment, one reply applied.
            incidents = [w for w in applied(cluster.writes(vendor="incidentio")) if f"OPS-{n}:" in str(w["body"])]
            assert len(incidents) == 1, (f"seed {SEED}", n, incidents)
            assert len(applied(cluster.writes(vendor="jira", target=f"OPS-{n}"))) == 1, f"seed {SEED}"
        replies = applied(cluster.writes(vendor="teams"))
        assert len(replies) == ticket - 1000, f"seed {SEED}: {len(replies)} replies"
        assert len({r["key"] for r in replies}) == len(replies)
    print(f"kill trials: {ROUNDS} rounds, seed {SEED}, recovered {len(recovery)} runs in flight, "
          f"max {max(recovery, default=0):.2f} s from the kill")  # fmt: skip
