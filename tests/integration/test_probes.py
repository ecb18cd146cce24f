"""`/healthz` and `/readyz` answered before the stack (entries/probes.py), against a real Postgres: many
probes at once make one ping, an answer stands for `FRESH_S` and not while the database is known to be
gone, a ping that does not answer is 503 within the bound, and a served app answers both in its own words."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import orjson
import psycopg

from tests.support.engine import engine_under_test
from tests.support.http import TLS, serving
from ticketiq.entries import probes
from ticketiq.entries.api import create_app
from ticketiq.runtime import release


def counted(ping: Callable[[], Awaitable[None]]) -> tuple[Callable[[], Awaitable[None]], list[int]]:
    made: list[int] = []

    async def counting() -> None:
        made.append(1)
        await ping()

    return counting, made


async def test_probes_asking_at_once_share_one_ping_and_its_answer_stands_a_while(db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:

        async def ping() -> None:
            await conn.execute("SELECT 1")

        counting, made = counted(ping)
        readiness = probes.Readiness(counting, lambda: False, "p-1")
        answers = await asyncio.gather(*(readiness.check() for _ in range(50)))
        assert {status for status, _ in answers} == {200}
        assert orjson.loads(answers[0][1]) == {"ready": True, "process": "p-1", **release.current().view()}
        assert len(made) == 1  # fifty probes, one statement
        await readiness.check()
        assert len(made) == 1  # within FRESH_S: the answer stands
        await asyncio.sleep(probes.FRESH_S + 0.05)
        assert (await readiness.check())[0] == 200
        assert len(made) == 2


async def test_while_the_database_is_known_gone_no_earlier_answer_stands(db_url: str) -> None:
    down = [False]
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:

        async def ping() -> None:
            await conn.execute("SELECT 1")

        counting, made = counted(ping)
        readiness = probes.Readiness(counting, lambda: down[0], "p-1")
        assert (await readiness.check())[0] == 200
        down[0] = True  # a statement elsewhere found the server gone
        assert (await readiness.check())[0] == 200  # it answers again: asked, not remembered
        assert len(made) == 2


async def test_a_database_that_does_not_answer_is_503_within_the_bound_and_one_ping_stays_out(db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        slow = [True]

        async def ping() -> None:
            await conn.execute("SELECT pg_sleep(3)" if slow and slow.pop() else "SELECT 1")

        counting, made = counted(ping)
        readiness = probes.Readiness(counting, lambda: False, "p-1")
        status, body = await readiness.check()
        assert status == 503
        assert orjson.loads(body) == {"ready": False, "reason": "the database did not answer within a second"}
        # The ping a probe gave up on is still out: the next probe waits for it, it makes no second one.
        assert (await readiness.check())[0] == 503
        assert len(made) == 1
        await asyncio.sleep(1.5)  # the slow ping answered at last; the next probe asks again and is ready
        assert (await readiness.check())[0] == 200
        assert len(made) == 2


async def test_a_served_app_answers_both_probes_and_sends_one_with_a_body_the_whole_way(
    db_url: str, tmp_path: Path
) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [{"text": "done"}]}, {"a": {"tools": []}}) as h:
        app = create_app(h.settings, h.process)
        async with serving(app) as base, httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client:
            assert (await client.get("/healthz")).json() == {"ok": True}
            ready = await client.get("/readyz")
            assert ready.status_code == 200
            assert ready.headers["content-type"] == "application/json"
            assert ready.json() == {"ready": True, "process": h.process.engine.deps.holder, **release.current().view()}
            # With a body, the probe goes through the stack: a body nested too deep is refused as on any route.
            deep = b"[" * 100 + b"]" * 100
            refused = await client.request(
                "GET", "/healthz", content=deep, headers={"content-type": "application/json"}
            )
            assert refused.status_code == 422
            assert refused.json()["detail"][0]["loc"] == ["body"]
            # Not a GET: not a probe's.
            assert (await client.post("/readyz")).status_code == 405
