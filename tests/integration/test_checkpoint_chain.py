"""I17: a rolled-back checkpoint or a reset loss count fails on resume and is audited; a process whose
seal keys cannot verify the cluster's key probe refuses to start; keys rotate without stranding runs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.crash import HeldCall, kill_driver, lapse
from tests.support.engine import engine_under_test, read_rows
from tests.support.standins import Standins
from ticketiq.errors import ConfigError
from ticketiq.leader.sweep import Sweeper
from ticketiq.process import AppProcess
from ticketiq.settings import Settings

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write"]}
CHAIN_COLUMNS = "step, state, seal, key_id, prev_seal, sealed_attempt, sealed_losses, seal_format"


async def status(db_url: str, run_id: str, timeout_s: float = 30.0, *wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        row = (await read_rows(db_url, "SELECT status, error FROM runs WHERE id = %s", run_id))[0]
        if row["status"] in wanted or time.monotonic() > deadline:
            return row
        await asyncio.sleep(0.02)


async def rejected(db_url: str, run_id: str) -> list[str]:
    rows = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s ORDER BY id", run_id)
    return [r["action"] for r in rows if r["action"] == "agent.run.checkpoint_rejected"]


async def test_a_checkpoint_rolled_back_to_an_earlier_step_is_refused_and_audited(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [READ, WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False, latency_ms=400) as h:  # fmt: skip
        run_id = await h.run("a")
        assert await h.engine.start(run_id)
        earlier: list[dict[str, Any]] = []
        while not earlier:
            earlier = await read_rows(db_url, f"SELECT {CHAIN_COLUMNS} FROM checkpoints WHERE run_id = %s AND step = 1",
                                      run_id)  # fmt: skip
            await asyncio.sleep(0.01)
        assert (await status(db_url, run_id, 30, "waiting"))["status"] == "waiting"  # at step 2, held
        # Someone puts the step-1 checkpoint back, with its own valid seal: a rollback.
        old = earlier[0]
        await read_rows(
            db_url,
            "UPDATE checkpoints SET step = %s, state = %s, seal = %s, key_id = %s, prev_seal = %s, "
            "sealed_attempt = %s, sealed_losses = %s, seal_format = %s WHERE run_id = %s",
            *[old[c] for c in CHAIN_COLUMNS.split(", ")], run_id,
        )  # fmt: skip
        [pending] = await h.engine.approvals("pending", 10)
        await h.engine.decide_approval(pending.id, True, "bob", None)
        row = await status(db_url, run_id, 30, "failed", "succeeded")
    assert row["status"] == "failed"
    assert "rolled back" in row["error"]
    assert await rejected(db_url, run_id) == ["agent.run.checkpoint_rejected"]
    assert h.probe.writes() == []  # nothing made from a checkpoint that does not hold


async def test_a_loss_count_reset_below_the_sealed_one_is_refused_and_audited(db_url: str, tmp_path: Path) -> None:
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"a": [READ, WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 probe=held.probe, lead=False) as h:  # fmt: skip
        run_id = await h.run("a")
        assert await h.engine.start(run_id)
        await held.at_vendor()
        await kill_driver(h.engine, run_id)
        held.released.set()
        await lapse(db_url, run_id)
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "waiting"
        sealed = await read_rows(db_url, "SELECT losses, sealed_losses FROM checkpoints WHERE run_id = %s", run_id)
        assert sealed == [{"losses": 1, "sealed_losses": 1}]
        # The loss count is reset, as if to dodge the loss limit.
        await read_rows(db_url, "UPDATE checkpoints SET losses = 0 WHERE run_id = %s", run_id)
        [pending] = await h.engine.approvals("pending", 10)
        await h.engine.decide_approval(pending.id, True, "bob", None)
        row = await status(db_url, run_id, 30, "failed", "succeeded")
    assert row["status"] == "failed"
    assert "reset" in row["error"]
    assert await rejected(db_url, run_id) == ["agent.run.checkpoint_rejected"]
    assert held.probe.writes() == []


def settings_for(db_url: str, home: Path, **overrides: Any) -> Settings:
    return Settings(home=home, database_url=db_url, lead=False, **overrides)


async def test_a_process_whose_generated_key_differs_from_the_clusters_refuses_to_start(
    db_url: str, tmp_path: Path
) -> None:
    # Two hosts on one database, neither given TICKETIQ_SEAL_KEYS: each generated a key of its own.
    first = await AppProcess.start(settings_for(db_url, tmp_path / "host-a"))
    try:
        with pytest.raises(ConfigError, match="TICKETIQ_SEAL_KEYS"):
            await AppProcess.start(settings_for(db_url, tmp_path / "host-b"))
        # A process with the same key starts.
        shared = (tmp_path / "host-a" / "seal.key").read_text()
        second = await AppProcess.start(settings_for(db_url, tmp_path / "host-c", seal_keys=shared))
        await second.stop()
    finally:
        await first.stop()


async def test_a_process_with_the_same_key_id_but_another_secret_refuses_to_start(db_url: str, tmp_path: Path) -> None:
    first = await AppProcess.start(settings_for(db_url, tmp_path / "a", seal_keys="k1:the-secret"))
    try:
        with pytest.raises(ConfigError, match="another secret"):
            await AppProcess.start(settings_for(db_url, tmp_path / "b", seal_keys="k1:a-typo"))
    finally:
        await first.stop()


async def test_keys_rotate_and_runs_waiting_across_the_rotation_resume(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    agents = yaml.safe_load((Path(__file__).parents[2] / "src/ticketiq/agents/sample.yaml").read_text())
    agents["approval_required"] = ["incidentio_create_incident"]
    (tmp_path / "agents.yaml").write_text(yaml.safe_dump(agents))

    @contextlib.asynccontextmanager
    async def process(keys: str) -> AsyncIterator[AppProcess]:
        settings = standins.settings(home=tmp_path / "home", seal_keys=keys, agents=tmp_path / "agents.yaml",
                                     lead=False)  # fmt: skip
        started = await AppProcess.start(settings)
        try:
            yield started
        finally:
            await started.stop()

    async def waiting_run(p: AppProcess, ticket: str) -> str:
        agent = p.engine.deps.catalog.get("triage")
        assert agent is not None
        run_id = (await p.engine.create_run(agent, f"Triage {ticket}: rotation")).id
        assert await p.engine.start(run_id)
        assert (await status(db_url, run_id, 30, "waiting"))["status"] == "waiting"
        return run_id

    async with process("k1:first-secret") as p:
        before = await waiting_run(p, "OPS-931")
    async with process("k1:first-secret,k2:second-secret") as p:  # 1. add the new key at the end, roll
        during = await waiting_run(p, "OPS-932")
    async with process("k2:second-secret,k1:first-secret") as p:  # 2. move it first, roll again
        assert (await read_rows(db_url, "SELECT key_id FROM seal_probe")) == [{"key_id": "k2"}]
        for pending in await p.engine.approvals("pending", 10):
            await p.engine.decide_approval(pending.id, True, "ops", None)
        for run_id in (before, during):
            assert (await status(db_url, run_id, 60, "succeeded", "failed"))["status"] == "succeeded"
    keys = await read_rows(db_url, "SELECT DISTINCT key_id FROM checkpoints")
    assert keys == [{"key_id": "k2"}]  # every checkpoint now sealed by the new key
    # A process that still has only the old key cannot verify what the cluster signs now.
    with pytest.raises(ConfigError, match="k2"):
        await AppProcess.start(standins.settings(home=tmp_path / "old", seal_keys="k1:first-secret", lead=False))
    # 3. the old key can go once no checkpoint is sealed with it.
    async with process("k2:second-secret"):
        pass
