"""JSON logs of a served app (issue 36, part 2): logging configured as `ticketiq serve` configures it with
TICKETIQ_LOG_FORMAT=json, a run started over the API and driven to its end; every line is one JSON object,
and the records made while the run is driven, ours and a library's, name its run, attempt and process; with
tracing on, also its trace and the span current when each was made, as the OTLP receiver got them."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.engine import Harness, engine_under_test
from tests.support.http import TLS, serving
from tests.support.log_capture import configured_logging
from tests.support.otlp_receiver import Receiver
from ticketiq.entries.api import create_app
from ticketiq.runtime import tracing
from ticketiq.settings import Settings

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"reader": [READ, READ, {"text": "read {jira_key}"}]}
AGENTS: dict[str, dict[str, Any]] = {"reader": {"tools": ["probe_read"]}}
SEAL_SECRET = "engine-test-secret"  # tests/support/engine.py's seal key


async def served_run(h: Harness, text: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """A run started over the API and driven to its end, its driver's last record written; its id and the
    bearer token it was started with."""
    token = await h.token("ops", "operator")
    async with (
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}) as api,
    ):
        made = await api.post("/v1/runs", json={"agent": "reader", "input": text}, headers=headers)
        assert made.status_code == 201, made.text
        run_id = str(made.json()["id"])
        ended = await api.get(f"/v1/runs/{run_id}", params={"wait": 20})
        assert ended.json()["status"] == "succeeded", ended.text
        task = h.engine.tasks.get(run_id)
        if task is not None:
            await task
    return run_id, token


async def test_a_served_run_s_records_name_its_run_attempt_and_process(db_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=db_url, log_format="json", seal_keys=f"test:{SEAL_SECRET}")
    with configured_logging(settings) as written:
        # The requests a run sends, as httpx says each at INFO: a library's records made inside the run.
        logging.getLogger("httpx").setLevel(logging.INFO)
        async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
            holder = h.process.engine.deps.holder
            run_id, token = await served_run(h, "check OPS-5")
    text = written.getvalue()
    assert SEAL_SECRET not in text and token not in text
    records = [json.loads(line) for line in text.splitlines()]  # every line one JSON object
    assert all({"time", "level", "logger", "message", "process"} <= set(r) for r in records), records
    ready = [r for r in records if r["message"] == f"process {holder} ready"]
    assert ready and ready[0]["process"] == holder and "run_id" not in ready[0]
    in_run = [r for r in records if r.get("run_id") == run_id]
    assert all(r["attempt"] == 1 and r["process"] == holder for r in in_run), in_run
    ending = [r for r in in_run if r["message"] == f"run {run_id} attempt 1: succeeded"]
    assert ending and ending[0]["logger"] == "ticketiq.engine.engine", in_run
    # Its probe reads went out from inside the run: httpx's records of them name it too.
    reads = [r for r in records if r["logger"] == "httpx" and "/probe/read" in r["message"]]
    assert len(reads) == 2 and all(r.get("run_id") == run_id for r in reads), reads


async def test_a_traced_run_s_records_name_its_trace_and_the_span_they_were_made_in(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    receiver = Receiver()
    settings = Settings(home=tmp_path, database_url=db_url, log_format="json", seal_keys=f"test:{SEAL_SECRET}")
    with configured_logging(settings) as written:
        logging.getLogger("httpx").setLevel(logging.INFO)
        async with serving(receiver.app()) as collector:
            monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
            try:
                async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
                    assert tracing.ON
                    run_id, _ = await served_run(
                        h, "check OPS-6", {"traceparent": f"00-{caller_trace}-{caller_span}-01"}
                    )
                    assert await asyncio.to_thread(tracing.flush, 10.0)
            finally:
                await asyncio.to_thread(tracing.stop)  # tracing is the interpreter's: off for the next test
    records = [json.loads(line) for line in written.getvalue().splitlines()]
    spans = {s["span_id"]: s for s in receiver.of_run(run_id)}
    in_run = [r for r in records if r.get("run_id") == run_id]
    # The requests the run sent went inside its spans: each record names the run's trace and a span the
    # receiver got, the model's its `chat` span (the model client says its first request only), each probe
    # read its call's.
    sent = [r for r in in_run if r["logger"] == "httpx"]
    assert all(r["trace_id"] == caller_trace and r["span_id"] in spans for r in sent), sent
    reads = [spans[r["span_id"]]["name"] for r in sent if "/probe/read" in r["message"]]
    chats = [spans[r["span_id"]]["name"] for r in sent if "/chat/completions" in r["message"]]
    assert reads == ["execute_tool probe_read"] * 2 and chats and set(chats) == {"chat reader"}, (reads, chats)
    # The attempt's end is said once its span has ended: the run and attempt, no span.
    ending = next(r for r in in_run if r["message"] == f"run {run_id} attempt 1: succeeded")
    assert ending["attempt"] == 1 and "span_id" not in ending
