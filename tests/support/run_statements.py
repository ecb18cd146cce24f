"""Which write statements are a run's own: what a step costs, as the I1 test and `bench/step_overhead.py`
both count it; and what a test's database ran (`statements_run`), for the tests that count statements.

A statement the run itself makes writes one of a run's own tables, or takes the run (take_run). The
process's own statements are not a step's: its job worker's claim poll (`UPDATE jobs`, every 0.5 s),
lease renewals, liveness and sweeps; on a loaded machine they fall inside a run's time and would be
counted as its steps'. Comments are dropped first: they are prose.
"""

from __future__ import annotations

import re

from tests.support.engine import read_rows

_RUN_STATEMENT = re.compile(
    r"\b((INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(runs|checkpoints|calls|transcripts|answers)|take_run\s*\()\b",
    re.IGNORECASE,
)
_COMMENT = re.compile(r"--[^\n]*")


def is_run_statement(query: str) -> bool:
    return _RUN_STATEMENT.search(_COMMENT.sub("", query)) is not None


async def statements_run(db_url: str, *, toplevel: bool = True) -> dict[str, int]:
    """The statements this test's database ran since pg_stat_statements was last reset, by their text as it
    keeps them (parameters as $n), with their calls; its own reads left out. `toplevel` False: statements
    run inside SQL functions as well."""
    rows = await read_rows(
        db_url,
        "SELECT query, calls FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND (toplevel OR NOT %s) AND query !~* 'pg_stat_statements'",
        toplevel,
    )
    out: dict[str, int] = {}
    for row in rows:
        out[row["query"]] = out.get(row["query"], 0) + int(row["calls"])
    return out
