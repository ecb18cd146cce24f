"""I16: text Postgres cannot store never fails a statement: what the model, tools and vendors say is
made storable before it is written, and the transcript says so."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.support.engine import engine_under_test, read_rows
from tests.support.standins import Standins
from ticketiq.process import AppProcess

DONE_WITH_NUL: dict[str, Any] = {"text": "done\x00 with {jira_key}"}
WRITE_WITH_NUL: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "a\x00b"}}]}
TOOLS = {"tools": ["probe_read", "probe_write"]}


async def entries(db_url: str, run_id: str) -> list[dict[str, Any]]:
    rows = await read_rows(db_url, "SELECT kind, body FROM transcripts WHERE run_id = %s ORDER BY id", run_id)
    out: list[dict[str, Any]] = []
    for row in rows:
        out += row["body"]["entries"] if row["kind"] == "entries" else [{"kind": row["kind"], "body": row["body"]}]
    return out


async def test_a_run_whose_jira_issue_description_holds_nul_succeeds(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    settings = standins.settings(home=tmp_path, seal_keys="t:text", lead=False)
    process = await AppProcess.start(settings)
    try:
        agent = process.engine.deps.catalog.get("triage")
        assert agent is not None
        run_id = (await process.engine.create_run(agent, "Triage BIN-7: the log has binary in it")).id
        assert await process.engine.start(run_id)
        status = await asyncio.wait_for(process.engine.tasks[run_id], 60)
    finally:
        await process.stop()
    assert status == "succeeded"
    noted = [e for e in await entries(db_url, run_id) if e["kind"] == "text_altered"]
    assert [e["body"]["where"] for e in noted] == ["the result of jira_get_issue (call 0)"]
    # What was stored reads back as JSON with the replacement character where the NUL was.
    state = (await read_rows(db_url, "SELECT state::jsonb AS s FROM checkpoints WHERE run_id = %s", run_id))[0]["s"]
    issue = next(m["content"] for m in state["messages"] if m["role"] == "tool")
    assert "\\u0000" not in issue and "\ufffd\ufffd exit=\ufffd" in issue


async def test_model_text_and_arguments_holding_nul_are_stored_with_a_note(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, {"n": [WRITE_WITH_NUL, DONE_WITH_NUL]}, {"n": TOOLS},
                                 lead=False) as h:  # fmt: skip
        run = await h.finish(await h.run("n"))
    assert run["status"] == "succeeded"
    assert run["answer"].startswith("done\ufffd with")
    assert h.probe.writes()[0]["args"] == {"note": "a\ufffdb"}  # made storable before it was sent
    noted = [e["body"]["where"] for e in await entries(db_url, str(run["id"])) if e["kind"] == "text_altered"]
    assert noted == ["the model's step", "the model's answer"]
