"""GET /metrics after real runs: runs started and ended, step, model-call and tool-call durations, and the
cluster's queues (waiting runs, pending approvals, queued jobs) read at scrape; a scrape while the
database does not answer still answers, without the queues."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.engine import engine_under_test
from tests.support.http import TLS, serving
from tests.support.tcp_proxy import TcpProxy
from ticketiq.entries.api import create_app
from ticketiq.storage.job_store import JobStore

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
AGENTS = {"t": {"tools": ["probe_read", "probe_write"]}, "held": {"tools": ["probe_keyed"]}}
SCRIPTS = {"t": [READ, WRITE, DONE], "held": [KEYED, DONE]}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_count_runs_and_time_steps_calls_and_show_the_queues(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, approval=["probe_keyed"], job_concurrency=0,
                                 lead=False) as h:  # fmt: skip
        assert (await h.finish(await h.run("t")))["status"] == "succeeded"
        assert (await h.finish(await h.run("held", channel="a2a")))["status"] == "waiting"
        await JobStore(h.process.db).create(str(uuid.uuid4()), "source_sync", {}, True, "ops")  # no worker here
        # A Stop on a run no process drives ends it at once, with no driver to count it.
        assert (await h.engine.request_stop(await h.run("t"), "ops")).status == "stopped"
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
        ):
            response = await client.get("/metrics")
    assert response.status_code == 200
    seen = samples(response.text)
    assert seen[("ticketiq_runs_started_total", (("agent", "t"), ("channel", "api")))] == 1
    assert seen[("ticketiq_runs_started_total", (("agent", "held"), ("channel", "a2a")))] == 1
    assert seen[("ticketiq_runs_ended_total", (("agent", "t"), ("channel", "api"), ("status", "succeeded")))] == 1
    assert seen[("ticketiq_runs_ended_total", (("agent", "t"), ("channel", "api"), ("status", "stopped")))] == 1
    assert ("ticketiq_runs_ended_total", (("agent", "held"), ("channel", "a2a"), ("status", "waiting"))) not in seen
    # Three steps of `t` (its read, its write, its answer); the held step of `held` waits for a person.
    assert seen[("ticketiq_step_seconds_count", (("agent", "t"),))] == 3
    assert ("ticketiq_step_seconds_count", (("agent", "held"),)) not in seen
    assert seen[("ticketiq_model_call_seconds_count", (("agent", "t"),))] == 3
    assert seen[("ticketiq_model_call_seconds_count", (("agent", "held"),))] == 1
    assert seen[("ticketiq_model_call_seconds_sum", (("agent", "t"),))] > 0
    assert seen[("ticketiq_tool_call_seconds_count", (("class", "read"), ("tool", "probe_read")))] == 1
    assert seen[("ticketiq_tool_call_seconds_count", (("class", "write"), ("tool", "probe_write")))] == 1
    assert ("ticketiq_tool_call_seconds_count", (("class", "keyed_write"), ("tool", "probe_keyed"))) not in seen
    assert seen[("ticketiq_runs_waiting", ())] == 1
    assert seen[("ticketiq_approvals_pending", ())] == 1
    assert seen[("ticketiq_jobs_queued", ())] == 1


async def test_a_scrape_while_the_database_does_not_answer_answers_without_the_queues(
    db_url: str, tmp_path: Path
) -> None:
    proxy = await TcpProxy.before(db_url).start()
    try:
        async with (
            engine_under_test(proxy.url(db_url), tmp_path, SCRIPTS, AGENTS, job_concurrency=0, lead=False) as h,
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
        ):
            before = samples((await client.get("/metrics")).text)
            proxy.pause()
            try:
                stalled = await client.get("/metrics")
            finally:
                proxy.resume()
    finally:
        await proxy.close()
    assert before[("ticketiq_runs_waiting", ())] == 0
    assert stalled.status_code == 200
    seen = samples(stalled.text)
    assert ("ticketiq_runs_waiting", ()) not in seen and ("ticketiq_jobs_queued", ()) not in seen
    assert ("ticketiq_runs_resumed_total", ()) in seen  # the process's own counts are still there
