"""What one run submitted through `POST /v1/runs` costs the database (issue 19), counted by
pg_stat_statements over a real socket and a real Postgres, against the stand-in model.

A keyed read-only run of three steps once cost 11 statements, each its own commit: the token lookup, the
Idempotency-Key's claim, the run's creation, its acquire, a read of its status, the key's finish, then
the driver's gate facts, three checkpoints and the end. Now: the token comes from the process's cache,
the run's own key is its dedupe (no claim, no finish), it is born taken by this process in the statement
that makes it, and that statement says its status and reads the gates' facts: the creation, a checkpoint
per step and the end."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.run_statements import statements_run
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "read {jira_key}"}
# What a request and its run touch; the process's own statements (lease renewals, the job worker's
# poll, liveness, the gate listener's ping) touch none of these.
_RUNS_OR_REQUESTS = re.compile(
    r"\b(runs|checkpoints|calls|transcripts|answers|run_attempts|api_tokens|idempotency_keys)\b|seal_checkpoint\(|"
    r"take_run\(",
    re.IGNORECASE,
)


async def listening(h: Harness) -> bool:
    return bool(h.engine.deps.gate_watch.connected)


async def statements(db_url: str) -> dict[str, int]:
    """Top-level statements about runs and requests since the reset, by their text, with their calls."""
    out: dict[str, int] = {}
    for query, calls in (await statements_run(db_url)).items():
        query = re.sub(r"--[^\n]*", "", query)  # comments are prose
        if _RUNS_OR_REQUESTS.search(query):
            text = " ".join(query.split())
            out[text] = out.get(text, 0) + calls
    return out


async def test_a_keyed_api_run_costs_its_creation_and_its_drivers_statements_only(db_url: str, tmp_path: Path) -> None:
    scripts = {"reads": [READ, READ, READ, DONE]}
    async with (
        engine_under_test(db_url, tmp_path, scripts, {"reads": {"tools": ["probe_read"]}}, lease_renew_s=600,
                          lead=False, job_concurrency=0) as h,
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
    ):  # fmt: skip
        caller = {"Authorization": f"Bearer {await h.token('cal', 'caller')}"}
        # Found tokens are kept once the process listens for their changes (it starts listening in the background).
        await eventually(lambda: listening(h), what="the gate and token listener connected")
        # The token's first request finds it (one lookup); from then on the process has it.
        warm = await client.post("/v1/runs", json={"agent": "reads", "input": "Look at OPS-0"}, headers=caller)
        await h.engine.tasks[warm.json()["id"]]
        await read_rows(db_url, "SELECT pg_stat_statements_reset()")
        made = await client.post("/v1/runs", json={"agent": "reads", "input": "Look at OPS-1"},
                                 headers={**caller, "Idempotency-Key": "cost-1"})  # fmt: skip
        assert made.status_code == 201, made.text
        assert made.json()["status"] == "running"
        assert await h.engine.tasks[made.json()["id"]] == "succeeded"
        seen = await statements(db_url)
    described = "\n".join(f"{n} x {q[:160]}" for q, n in seen.items())
    # No token lookup, no Idempotency-Key claim or finish, no read of the status, no acquire of its own.
    assert not [q for q in seen if "api_tokens" in q], described
    assert not [q for q in seen if "idempotency_keys" in q], described
    assert not [q for q in seen if q.startswith("SELECT status, answer, error FROM runs")], described
    assert not [q for q in seen if "take_run(" in q], described  # born taken: no acquire
    made_it = [q for q in seen if "INSERT INTO runs" in q]
    assert len(made_it) == 1 and "INSERT INTO leases" in made_it[0], described  # made and taken at once
    # The gates' facts come with the take: no read of them at the first step.
    assert not [q for q in seen if "gate_context" in q and "INSERT INTO runs" not in q], described
    # The creation, a checkpoint per read-only step (I1, I2) and the end (with the answer).
    assert sum(seen.values()) == 1 + 3 + 1, described


async def test_a_post_then_one_wait_reads_the_run_twice_however_long_it_takes(db_url: str, tmp_path: Path) -> None:
    # The wait reads the run as it begins and at the change that ends it: two reads, where two polls would
    # make two too, and a slower run makes no more (the wait is woken, it does not poll).
    scripts = {"reads": [READ, READ, READ, DONE]}
    async with (
        engine_under_test(db_url, tmp_path, scripts, {"reads": {"tools": ["probe_read"]}}, lease_renew_s=600,
                          lead=False, job_concurrency=0, latency_ms=300) as h,
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
    ):  # fmt: skip
        caller = {"Authorization": f"Bearer {await h.token('cal', 'caller')}"}
        await eventually(lambda: listening(h), what="the gate and token listener connected")
        warm = await client.post("/v1/runs", json={"agent": "reads", "input": "Look at OPS-0"}, headers=caller)
        await h.engine.tasks[warm.json()["id"]]
        await read_rows(db_url, "SELECT pg_stat_statements_reset()")
        made = await client.post("/v1/runs", json={"agent": "reads", "input": "Look at OPS-1"}, headers=caller)
        waited = await client.get(f"/v1/runs/{made.json()['id']}", params={"wait": 30}, headers=caller)
        assert waited.json()["status"] == "succeeded"
        seen = await statements(db_url)
    described = "\n".join(f"{n} x {q[:160]}" for q, n in seen.items())
    reads = {q: n for q, n in seen.items() if q.startswith("SELECT") and " FROM runs" in q}
    assert sum(reads.values()) == 2, described
