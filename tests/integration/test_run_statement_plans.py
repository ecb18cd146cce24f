"""The statements that call a function giving back one row (seal_checkpoint, take_run, gate_context,
starter_authority) read the big tables by their keys: planned for the 1000 rows Postgres assumes of a
set-returning function, the statement that ends a run read runs and run_attempts whole, once per run
(migration 038). Their generic plans are read with thousands of runs in the tables, as a database that has
run for a while holds."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from ticketiq.storage import database
from ticketiq.storage.queries import QUERIES

ONE_ROW = re.compile(r"\b(seal_checkpoint|take_run|gate_context|starter_authority)\(")
BIG = {"runs", "run_attempts", "checkpoints", "calls", "transcripts", "audit_log", "answers"}
STATEMENTS = sorted(name for name, text in QUERIES.items() if ONE_ROW.search(text))


def seq_scans(plan: dict[str, Any]) -> set[str]:
    found = {plan["Relation Name"]} if plan.get("Node Type") == "Seq Scan" and "Relation Name" in plan else set()
    for child in plan.get("Plans", []):
        found |= seq_scans(child)
    return found


@pytest.fixture
async def many_runs(db_url: str) -> str:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id)"
            " SELECT gen_random_uuid(), 'triage', 'x', 'ops', 'acme', 'api', false, 'c' || n"
            " FROM generate_series(1, 5000) n"
        )
        await conn.execute("INSERT INTO run_attempts (run_id, attempt, process) SELECT id, 1, 'p' FROM runs")
        for table in ("runs", "run_attempts", "checkpoints", "leases"):
            await conn.execute(f"ANALYZE {table}")
    return db_url


def test_the_one_row_functions_are_called_by_the_statements_that_end_and_checkpoint_a_run() -> None:
    assert {"runs.end", "runs.write_checkpoint", "runs.create_taken"} <= set(STATEMENTS)


@pytest.mark.parametrize("name", STATEMENTS)
async def test_a_statement_calling_a_one_row_function_reads_the_big_tables_by_key(many_runs: str, name: str) -> None:
    async with await psycopg.AsyncConnection.connect(many_runs, autocommit=True) as conn:
        text = database.positional(name).text.decode()
        cur = await conn.execute(b"EXPLAIN (GENERIC_PLAN, FORMAT JSON) " + text.encode())
        found = await cur.fetchone()
        assert found is not None
        scanned = seq_scans(found[0][0]["Plan"])
    assert not scanned & BIG, f"{name} reads {sorted(scanned & BIG)} whole"
