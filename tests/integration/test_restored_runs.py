"""I24: a run a restore found unfinished settles each write it plans before sending it. A keyed write its
vendor dedupes goes out under its step key (the key the lost steps used); a write that can be neither read
back nor deduped waits for an operator, with the reason, until `POST /v1/runs/{id}/resume` (operator) lets
it go out once, or a Stop ends the run. A run that waits for no such word: 409; an unknown run: 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from tests.integration.test_api import ACTOR, until
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.storage import restore_store

BLIND: dict[str, Any] = {"calls": [{"tool": "probe_blind", "arguments": {"note": "{jira_key}"}}]}
KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
SCRIPTS = {"blind": [BLIND, DONE], "keyed": [KEYED, DONE]}
AGENTS = {"blind": {"tools": ["probe_blind"]}, "keyed": {"tools": ["probe_keyed"]}}


async def restored(db_url: str, label: str = "test.dump, taken 2026-12-06 20:00:00 UTC") -> int:
    """What `ticketiq db restore` does to the runs a backup holds unfinished."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        return await restore_store.mark(conn, label)


async def test_a_restored_keyed_write_goes_out_under_its_step_key_settled_and_audited(
    db_url: str, tmp_path: Path
) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        run_id = await h.run("keyed", "look at OPS-71")
        assert await restored(db_url) == 1
        run = await h.finish(run_id)
    assert run["status"] == "succeeded"
    calls = await read_rows(db_url, "SELECT step_key, sent_key, settlement FROM calls WHERE run_id = %s", run_id)
    assert [w["key"] for w in h.probe.writes()] == [calls[0]["step_key"]]  # the key the lost steps sent
    assert calls[0]["settlement"] == "resent_same_key"
    audit = await read_rows(db_url, "SELECT action, detail FROM audit_log WHERE run_id = %s ORDER BY id", run_id)
    assert [a["detail"]["backup"] for a in audit if a["action"] == "agent.run.restored"] == [
        "test.dump, taken 2026-12-06 20:00:00 UTC"
    ]
    settled = [a["detail"] for a in audit if a["action"] == "agent.call.settled_after_restore"]
    assert [(d["tool"], d["route"], d["happened"]) for d in settled] == [
        ("probe_keyed", "resent_same_key", "resent_same_key")
    ]


async def test_a_write_no_one_can_settle_waits_for_an_operator_then_goes_out_once(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        token = await h.token(ACTOR, "operator")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,  # fmt: skip
        ):
            run_id = await h.run("blind", "look at OPS-72")
            finished = await h.run("keyed", "look at OPS-73")
            await h.finish(finished)  # ended before the restore: not restored, nothing to resume
            await restored(db_url)
            assert await h.engine.start(run_id)
            run = await until(client, run_id, "waiting")
            assert [w["kind"] for w in h.probe.writes()] == ["keyed"]  # the finished run's, before the restore
            said = run["waiting_for"]["question"]
            assert "restored from a backup" in said and "call 0 of step 1 (probe_blind)" in said, said
            assert "no reader" in said and "resume the run" in said
            assert "(test.dump, taken 2026-12-06 20:00:00 UTC)" in said, said  # which backup
            assert run["restored"]["from"] == "test.dump, taken 2026-12-06 20:00:00 UTC"
            assert (await client.get(f"/v1/runs/{finished}")).json()["restored"] is None

            # A run that waits for no operator's word, an unknown run, a caller: refused, nothing sent.
            refused = await client.post(f"/v1/runs/{finished}/resume")
            assert refused.status_code == 409 and refused.json()["detail"][0]["loc"] == ["path", "run_id"]
            missing = await client.post("/v1/runs/00000000-0000-0000-0000-000000000000/resume")
            assert missing.status_code == 404 and missing.json()["detail"][0]["loc"] == ["path", "run_id"]
            bad = await client.post(f"/v1/runs/{run_id}/resume", json={"reason": ""})
            assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "reason"
            caller = await h.token("cal", "caller")
            async with httpx.AsyncClient(verify=TLS, base_url=base, timeout=30,
                                         headers={"Authorization": f"Bearer {caller}"}) as as_caller:  # fmt: skip
                assert (await as_caller.post(f"/v1/runs/{run_id}/resume")).status_code == 403
            assert [w["kind"] for w in h.probe.writes()] == ["keyed"]

            resumed = await client.post(f"/v1/runs/{run_id}/resume", json={"reason": "checked the receiver: not there"})
            assert resumed.status_code == 200, resumed.text
            assert resumed.json()["writes_released"] == 1
            await until(client, run_id, "succeeded")
            again = await client.post(f"/v1/runs/{run_id}/resume")
            assert again.status_code == 409
    assert [w["kind"] for w in h.probe.writes()] == ["keyed", "blind"]  # sent once, on the operator's word
    audit = await read_rows(db_url, "SELECT action, actor, detail FROM audit_log WHERE run_id = %s AND action = "
                                    "'agent.run.resumed_by_operator'", run_id)  # fmt: skip
    assert [(a["actor"], a["detail"]["reason"]) for a in audit] == [(ACTOR, "checked the receiver: not there")]
    assert audit[0]["detail"]["approvals"][0]["tool"] == "probe_blind"


async def test_a_held_write_is_never_sent_when_the_run_is_stopped(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        run_id = await h.run("blind", "look at OPS-74")
        await restored(db_url)
        run = await h.finish(run_id)
        assert run["status"] == "waiting"
        await stop(h, run_id)
        assert (await h.process.db.fetch_one("runs.status", {"run_id": run_id}) or {})["status"] == "stopped"
    assert h.probe.writes() == []
    held = await read_rows(db_url, "SELECT status, asked_why FROM approvals WHERE run_id = %s", run_id)
    assert [h["status"] for h in held] == ["withdrawn"] and "restored from a backup" in held[0]["asked_why"]


async def stop(h: Harness, run_id: str) -> None:
    await h.engine.request_stop(run_id, ACTOR)
