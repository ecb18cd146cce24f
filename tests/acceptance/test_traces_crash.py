"""One trace a run across a SIGKILL (issue 36's done-when): two `ticketiq serve` processes sending traces to
a real OTLP/HTTP receiver, four triage runs, the process holding them killed. The survivor writes the spans
the killed process held and never sent (the lost attempt, the step in flight, the calls in doubt) from the
write-ahead record, and the takeover between the two attempts."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable

import pytest

from tests.support.cluster import Cluster
from tests.support.otlp_receiver import Receiver, receiving_in_thread
from ticketiq.runtime import tracing


@pytest.mark.long
def test_a_killed_processes_runs_each_keep_one_trace_with_both_attempts_and_the_step_it_held(
    make_cluster: Callable[..., Cluster],
) -> None:
    receiver = Receiver()
    with receiving_in_thread(receiver) as collector:
        cluster = make_cluster("--model-latency-ms", "1000")
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        cluster.app("survivor", lead=True, env=traced)
        victim = cluster.app("victim", lead=False, env=traced)
        runs = [cluster.post_run(victim, "triage", f"Triage OPS-{910 + i}: traced") for i in range(4)]

        def at_second_step(run_id: str) -> Callable[[], bool]:
            return lambda: bool(cluster.run(run_id)["step"] >= 2)

        for run_id in runs:
            cluster.wait_until(at_second_step(run_id), 60, f"run {run_id} at its second step")
        os.kill(victim.pid, signal.SIGKILL)
        for run_id in runs:
            assert cluster.wait_run(run_id, timeout_s=120)["status"] == "succeeded", cluster.logs()

        def all_sent() -> bool:
            return all(any(s["name"] == "invoke_agent triage" and s["attributes"]["ticketiq.run.attempt"] == 2
                           for s in receiver.of_run(r)) for r in runs)  # fmt: skip

        cluster.wait_until(all_sent, 30, "the survivor's spans at the receiver")
        time.sleep(0.5)  # the batch in flight lands
    for n, run_id in enumerate(runs):
        sent = receiver.of_run(run_id)
        # A span the killed process did send is written again under its own id: the same span, never a
        # second one (a backend keeps one per id).
        assert all(len({(s["name"], s["parent_span_id"]) for s in sent if s["span_id"] == i}) == 1
                   for i in {s["span_id"] for s in sent})  # fmt: skip
        spans = list({s["span_id"]: s for s in sent}.values())
        described = "\n".join(sorted(f"{s['name']} a{s['attributes'].get(tracing.RUN_ATTEMPT)}" for s in spans))
        assert {s["trace_id"] for s in spans} == {run_id.replace("-", "")}, described  # one trace, the run's
        assert all(tracing.RUN_ATTEMPT in s["attributes"] for s in spans), described
        names = Counter(s["name"] for s in spans)
        assert names["chat triage"] >= 4 and names["execute_tool jira_add_comment"] >= 1, described
        attempts = {s["attributes"]["ticketiq.run.attempt"] for s in spans}
        assert attempts == {1, 2}, described
        lost = next(
            s for s in spans if s["name"] == "invoke_agent triage" and s["attributes"][tracing.RUN_ATTEMPT] == 1
        )
        survivor = next(
            s for s in spans if s["name"] == "invoke_agent triage" and s["attributes"][tracing.RUN_ATTEMPT] == 2
        )
        assert lost["status"][0] == 2 and lost["attributes"]["ticketiq.run.ended_as"] == "lost"  # STATUS_CODE_ERROR
        assert lost["attributes"][tracing.PROCESS] != survivor["attributes"][tracing.PROCESS]
        assert lost["attributes"]["ticketiq.written_by"] == survivor["attributes"][tracing.PROCESS]
        # The step in flight at the kill: once, under the lost attempt, written by the survivor.
        held = [s for s in spans if s["attributes"].get("ticketiq.written_by") and s["name"].startswith("step ")]
        assert len(held) == 1, described
        assert held[0]["parent_span_id"] == lost["span_id"]
        steps_of_lost = Counter(s["name"] for s in spans if s["name"].startswith("step ")
                                and s["attributes"][tracing.RUN_ATTEMPT] == 1)  # fmt: skip
        assert max(steps_of_lost.values()) == 1, described
        takeover = next(s for s in spans if s["name"] == "takeover")
        assert takeover["parent_span_id"] == survivor["span_id"]
        assert (lost["trace_id"], lost["span_id"]) in takeover["links"]
        assert takeover["attributes"]["ticketiq.takeover.lost_process"] == lost["attributes"][tracing.PROCESS]
        # The vendor saw the call's own span as its parent: the stand-in kept the traceparent it was sent.
        comments = [s["span_id"] for s in spans if s["name"] == "execute_tool jira_add_comment"]
        landed = [w for w in cluster.writes(vendor="jira", target=f"OPS-{910 + n}") if w["effect"] == "applied"]
        assert len(landed) == 1 and landed[0]["traceparent"].split("-")[2] in comments, (landed, comments)
