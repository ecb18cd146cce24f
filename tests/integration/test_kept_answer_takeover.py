"""I12: a run taken over while it hands on its kept answer stays `answered`, so the purge of kept answers
spares that answer however long the hand-on takes, and the next attempt hands it on.

Migration 012 rewrote `take_run()` with `r.status <> 'running'`, undoing 005's `NOT IN ('running',
'answered')`: a takeover turned `answered` into `running`, the purge no longer spared the answer, and
once its time passed the next attempt failed the run with "the kept answer is gone". Migration 018
puts the condition back.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import kill_driver, lapse, reaches, status_of
from tests.support.engine import engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"helper": [READ, {"text": "answered {jira_key}"}]}
AGENTS: dict[str, dict[str, Any]] = {"helper": {"tools": ["probe_read"]}}


async def test_an_answered_run_taken_over_keeps_its_answer_past_its_time_and_hands_it_on(
    db_url: str, tmp_path: Path
) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        token = await h.token("ops", "admin")
        reached: asyncio.Queue[int] = asyncio.Queue()
        handed: list[str] = []

        async def hand_on(driver: Any, answer: str) -> dict[str, Any]:
            handed.append(answer)
            if len(handed) < 3:
                reached.put_nowait(driver.attempt)
                await asyncio.Event().wait()  # these attempts never get past here: their process dies
            return {"posted": True}

        h.engine.deps.hand_ons["copilot"] = hand_on
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            turn = asyncio.create_task(
                client.post("/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-31", "question": "q"})
            )
            first = await asyncio.wait_for(reached.get(), 30)
            rows = await read_rows(db_url, "SELECT id::text AS id FROM runs WHERE channel = 'copilot'")
            run_id = rows[0]["id"]
            assert await status_of(db_url, run_id) == "answered"

            # The first process dies mid hand-on; the sweep takes the run over.
            await kill_driver(h.engine, run_id)
            await lapse(db_url, run_id)
            await h.process.elector.sweeper.sweep_once(lapsed=True)
            second = await asyncio.wait_for(reached.get(), 30)
            assert second > first
            assert await status_of(db_url, run_id) == "answered"  # 012's take_run made it `running`

            # The second dies too, after the answer's time passed: the purge must spare it.
            await kill_driver(h.engine, run_id)
            await read_rows(db_url, "UPDATE answers SET kept_until = now() - interval '1 s' WHERE run_id = %s", run_id)
            await h.process.elector.sweeper.prune()
            kept = await read_rows(db_url, "SELECT answer FROM answers WHERE run_id = %s", run_id)
            assert kept == [{"answer": "answered OPS-31"}]

            # The third attempt hands on the kept answer: the run succeeds with it.
            await lapse(db_url, run_id)
            await h.process.elector.sweeper.sweep_once(lapsed=True)
            await reaches(db_url, run_id, "succeeded", "failed")
            run = (await client.get(f"/v1/runs/{run_id}")).json()
            turn.cancel()  # its caller hung up long ago: the answer lands on the transcript
            with contextlib.suppress(asyncio.CancelledError):
                await turn
    assert (run["status"], run["error"], run["answer"]) == ("succeeded", None, "answered OPS-31")
    assert handed == ["answered OPS-31"] * 3  # the kept answer each time; the model was never asked again
    assert run["losses"] == 2
