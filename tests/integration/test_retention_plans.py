"""Every statement of the retention pass reads an index at 200,000 ended runs (issue 34): its plan reads none
of the tables a run fills whole, as the sweeps' statements are read in bench/scale.py."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.support.ended_runs import fill
from ticketiq.storage.queries import QUERIES

RUNS = 200_000
# The tables 200,000 finished runs fill: a plan that reads one of them whole grows with the history.
BIG = ("runs", "checkpoints", "calls", "transcripts", "audit_log", "run_attempts", "answers")
LEADER = "plans-leader"
STATEMENTS: dict[str, dict[str, Any]] = {
    "retention.purgeable_runs": {"keep_s": 60.0, "limit": 1000},
    "retention.purge_runs": {"leader": LEADER, "keep_s": 60.0, "limit": 1000, "ids": None},
    "retention.purge_audit": {"leader": LEADER, "keep_s": 86400.0, "limit": 1000},
    "retention.purge_jobs": {"leader": LEADER, "keep_s": 86400.0, "limit": 1000},
    "retention.purge_short_lived": {
        "leader": LEADER,
        "limit": 1000,
        "keys_s": 86400.0,
        "processes_s": 86400.0,
        "runless_s": 604800.0,
    },
    "retention.oldest": {},
    "retention.last_pass": {},
}
# Not here: `retention.due` and `retention.rows`, which `retention status` reads to count what is due and what
# each table holds; counting most of a table is best done by reading it. No pass makes them.


def read_whole(plan: str) -> list[str]:
    return [t for t in BIG if f"Seq Scan on {t} " in plan or plan.endswith(f"Seq Scan on {t}")]


@pytest.mark.long
async def test_each_retention_statement_reads_an_index_at_200k_ended_runs(db_url: str) -> None:
    await fill(db_url, RUNS - 1_000, ago_s=3600)  # most ended an hour ago, past a policy of a minute
    await fill(db_url, 1_000, ago_s=0)  # some just now
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("UPDATE runs SET held_at = now() WHERE id IN (SELECT id FROM runs LIMIT 50)")
        await conn.execute("ANALYZE")
        whole = {}
        for name, params in STATEMENTS.items():
            cur = await conn.execute("EXPLAIN " + QUERIES[name], params)
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
            whole[name] = read_whole(plan)
    assert whole == {name: [] for name in STATEMENTS}
