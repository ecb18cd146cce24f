"""I14: a write in doubt is read back only once the process that marked it can no longer have it in
flight. Real stand-ins over real sockets; a process "dies" with its request still at the vendor (the
stand-in stalls it, then applies it), exactly as a SIGKILL or a dropped liveness connection leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from tests.support.crash import eventually, kill_driver, lapse, reaches
from tests.support.engine import read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins
from ticketiq.errors import LeaseLost
from ticketiq.leader.sweep import Sweeper
from ticketiq.process import AppProcess
from ticketiq.tools.base import CallContext, SendWindow
from ticketiq.tools.http import Send, VendorFailed, request


@contextlib.asynccontextmanager
async def app_process(standins: Standins, home: Path, **overrides: Any) -> AsyncIterator[AppProcess]:
    settings = standins.settings(home=home, seal_keys="t:read-back-secret", call_concurrency=1, **overrides)
    process = await AppProcess.start(settings)
    try:
        yield process
    finally:
        await process.stop()


def comment_in_doubt(db_url: str, run_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rows = await read_rows(
            db_url,
            "SELECT 1 FROM calls WHERE run_id = %s AND tool = 'jira_add_comment' AND status = 'in_doubt'",
            run_id,
        )
        return bool(rows)

    return check


async def triage(process: AppProcess, ticket: str) -> str:
    agent = process.engine.deps.catalog.get("triage")
    assert agent is not None
    created = await process.engine.create_run(agent, f"Triage {ticket}: checkout fails")
    assert await process.engine.start(created.id)
    return created.id


def applied(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["effect"] == "applied"]


async def resumed_calls(db_url: str, run_id: str) -> dict[str, str]:
    rows = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    assert len(rows) == 1, rows
    return {c["tool"]: c["happened"] for c in rows[0]["detail"]["calls"]}


async def test_a_write_in_flight_when_its_process_died_is_read_back_after_it_landed_not_sent_twice(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    # The vendor holds the comment 2 s before it applies it; the process dies 0.2 s into that.
    await standins.fault("jira", "stall", stall_s=2.0, operation="add_comment")
    async with app_process(standins, tmp_path, lead=False, write_budget_s=4.0) as p:
        run_id = await triage(p, "OPS-901")
        await eventually(comment_in_doubt(db_url, run_id))
        marked = time.monotonic()
        await asyncio.sleep(0.2)
        await kill_driver(p.engine, run_id)  # the driver is gone; its request stays with the vendor
        await lapse(db_url, run_id)
        assert await Sweeper(p.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(p.engine.tasks[run_id], 60) == "succeeded"
        await asyncio.sleep(max(0.0, marked + 3.0 - time.monotonic()))  # the stalled request has landed
    comments = applied(await standins.writes(vendor="jira", operation="add_comment", target="OPS-901"))
    assert len(comments) == 1, comments  # the late comment was found, not sent again
    happened = await resumed_calls(db_url, run_id)
    assert happened["jira_add_comment"] == "found"
    assert happened["teams_reply"] == "made"


async def test_a_process_whose_liveness_dropped_has_its_writes_waited_out_before_a_read_back(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    await standins.fault("jira", "stall", stall_s=2.0, operation="add_comment")
    async with (
        app_process(standins, tmp_path / "a", lead=False, write_budget_s=4.0) as victim,
        app_process(standins, tmp_path / "b", lead=True, write_budget_s=4.0) as survivor,
    ):
        run_id = await triage(victim, "OPS-902")
        await eventually(comment_in_doubt(db_url, run_id))
        marked = time.monotonic()
        await asyncio.sleep(0.2)
        # The victim is alive, but its liveness connection drops: the leader claims its runs at once.
        assert victim.liveness._conn is not None
        dropped = victim.engine.deps.holder
        await read_rows(db_url, "SELECT pg_terminate_backend(%s)", victim.liveness._conn.info.backend_pid)

        await reaches(db_url, run_id, "succeeded", "failed", timeout_s=60)
        await asyncio.sleep(max(0.0, marked + 3.0 - time.monotonic()))  # the stalled request has landed
        # Resumed by a live identity other than the dropped one: the survivor, or the victim come back
        # under its new identity (the spread may hand the claimed run to either, migration 012).
        resumed = await read_rows(
            db_url, "SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
        )
        assert [r["actor"] for r in resumed] in ([survivor.engine.deps.holder], [victim.engine.deps.holder])
        assert resumed[0]["actor"] != dropped
    assert (await read_rows(db_url, "SELECT status, error FROM runs WHERE id = %s", run_id))[0]["status"] == "succeeded"
    comments = applied(await standins.writes(vendor="jira", operation="add_comment", target="OPS-902"))
    assert len(comments) == 1, comments
    assert (await resumed_calls(db_url, run_id))["jira_add_comment"] == "found"


async def test_the_mark_records_the_latest_moment_the_write_can_be_in_flight(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    # Budget 10 s, TTL 8 s, a request bound of 1 s: the lease's expiry plus one request timeout is sooner.
    await standins.fault("jira", "stall", stall_s=0.5, operation="add_comment")
    async with app_process(standins, tmp_path, lead=False, http_timeout_s=1.0) as p:
        run_id = await triage(p, "OPS-903")
        await eventually(comment_in_doubt(db_url, run_id))
        row = (
            await read_rows(
                db_url,
                "SELECT extract(epoch FROM c.in_flight_until - c.updated_at) AS after_mark_s, "
                "extract(epoch FROM c.in_flight_until - l.expires_at) AS after_lease_s "
                "FROM calls c JOIN leases l ON l.name = 'checkpoint:' || c.run_id::text "
                "WHERE c.run_id = %s AND c.tool = 'jira_add_comment'",
                run_id,
            )
        )[0]
        assert await asyncio.wait_for(p.engine.tasks[run_id], 60) == "succeeded"
    assert float(row["after_mark_s"]) <= 10.0
    assert float(row["after_lease_s"]) <= 1.0 + 0.01  # the expiry at the mark, plus one request bound


async def test_no_try_of_a_write_starts_after_its_budget(db_url: str, standins: Standins, tmp_path: Path) -> None:
    # The vendor refuses with 429 and asks for 2 s; the write's whole budget is 1 s: it is not retried.
    await standins.fault("jira", "429", retry_after_s=2.0, operation="add_comment")
    async with app_process(standins, tmp_path, lead=False, write_budget_s=1.0) as p:
        run_id = await triage(p, "OPS-904")
        assert await asyncio.wait_for(p.engine.tasks[run_id], 60) == "succeeded"
    tries = await standins.writes(vendor="jira", operation="add_comment", target="OPS-904")
    assert [t["effect"] for t in tries] == ["refused"]
    outcome = await read_rows(
        db_url, "SELECT outcome::text AS o FROM calls WHERE run_id = %s AND tool = 'jira_add_comment'", run_id
    )
    assert "budget was spent" in outcome[0]["o"]


async def test_the_lease_is_checked_after_the_connection_is_ready_and_before_any_byte_is_sent() -> None:
    received: list[str] = []
    app = FastAPI()

    @app.post("/write")
    async def write(request: Request) -> dict[str, bool]:
        received.append((await request.body()).decode())
        return {"ok": True}

    checks: list[float] = []

    def before_send() -> None:
        checks.append(time.monotonic())
        if len(checks) == 2:  # the second check is the last moment: the lease was lost meanwhile
            raise LeaseLost("r", "taken over while the connection was being made")

    from ticketiq.settings import Settings

    async with serving(app) as base, httpx.AsyncClient(verify=TLS) as client:
        ctx = CallContext(
            run_id="r", tool="t", args={}, key="k", http=client, settings=Settings(), before_send=before_send,
            window=SendWindow(budget_ends=time.monotonic() + 10, lease_deadline=time.monotonic() + 10),
        )  # fmt: skip
        with pytest.raises(LeaseLost):
            await request(ctx, "probe", "POST", f"{base}/write", send=Send.UNKEYED, json={"a": 1})
    assert received == []  # nothing reached the vendor
    assert len(checks) == 2


def test_a_write_window_closes_at_its_budget_or_the_lease_deadline_it_had() -> None:
    window = SendWindow(budget_ends=110.0, lease_deadline=105.0)
    assert window.may_send(104.9) and not window.may_send(105.0)  # the lease deadline at the mark rules
    assert window.try_timeout(100.0, 15.0) == 10.0  # a try lasts at most until the budget ends
    assert window.try_timeout(108.0, 1.0) == 1.0
    assert window.try_timeout(111.0, 1.0) == 0.0


async def test_a_write_whose_budget_is_spent_before_its_first_try_is_never_sent() -> None:
    received: list[str] = []
    app = FastAPI()

    @app.post("/write")
    async def write() -> dict[str, bool]:
        received.append("x")
        return {"ok": True}

    from ticketiq.settings import Settings

    async with serving(app) as base, httpx.AsyncClient(verify=TLS) as client:
        now = time.monotonic()
        ctx = CallContext(
            run_id="r", tool="t", args={}, key="k", http=client, settings=Settings(),
            window=SendWindow(budget_ends=now - 0.1, lease_deadline=now + 10),
        )  # fmt: skip
        with pytest.raises(VendorFailed) as failed:
            await request(ctx, "probe", "POST", f"{base}/write", send=Send.UNKEYED, json={})
    assert received == []
    assert failed.value.outcome.uncertain is False  # nothing went out: not in doubt
