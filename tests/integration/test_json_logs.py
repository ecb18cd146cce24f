"""JSON logs of a served app (issue 36, part 2): logging configured as `ticketiq serve` configures it with
TICKETIQ_LOG_FORMAT=json, a run started over the API and driven to its end; every line is one JSON object,
and the records made while the run is driven, ours and a library's, name its run, attempt and process."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import httpx

from tests.support.engine import engine_under_test
from tests.support.http import TLS, serving
from tests.support.log_capture import configured_logging
from ticketiq.entries.api import create_app
from ticketiq.settings import Settings

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"reader": [READ, READ, {"text": "read {jira_key}"}]}
AGENTS: dict[str, dict[str, Any]] = {"reader": {"tools": ["probe_read"]}}
SEAL_SECRET = "engine-test-secret"  # tests/support/engine.py's seal key


async def test_a_served_run_s_records_name_its_run_attempt_and_process(db_url: str, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, database_url=db_url, log_format="json", seal_keys=f"test:{SEAL_SECRET}")
    with configured_logging(settings) as written:
        # The requests a run sends, as httpx says each at INFO: a library's records made inside the run.
        logging.getLogger("httpx").setLevel(logging.INFO)
        async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
            holder = h.process.engine.deps.holder
            token = await h.token("ops", "operator")
            async with (
                serving(create_app(h.settings, h.process)) as base,
                httpx.AsyncClient(
                    verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
                ) as client,
            ):
                made = await client.post("/v1/runs", json={"agent": "reader", "input": "check OPS-5"})
                assert made.status_code == 201, made.text
                run_id = made.json()["id"]
                ended = await client.get(f"/v1/runs/{run_id}", params={"wait": 20})
                assert ended.json()["status"] == "succeeded", ended.text
                await h.engine.wait_terminal(run_id, 10)
                task = h.engine.tasks.get(run_id)
                if task is not None:  # its driver's last record: written once the task is done
                    await task
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
