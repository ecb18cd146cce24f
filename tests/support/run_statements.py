"""Which write statements are a run's own: what a step costs, as the I1 test and `bench/step_overhead.py`
both count it.

A statement the run itself makes writes one of a run's own tables, or takes the run (take_run). The
process's own statements are not a step's: its job worker's claim poll (`UPDATE jobs`, every 0.5 s),
lease renewals, liveness and sweeps; on a loaded machine they fall inside a run's time and would be
counted as its steps'. Comments are dropped first: they are prose.
"""

from __future__ import annotations

import re

_RUN_STATEMENT = re.compile(
    r"\b((INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(runs|checkpoints|calls|transcripts|answers)|take_run\s*\()\b",
    re.IGNORECASE,
)
_COMMENT = re.compile(r"--[^\n]*")


def is_run_statement(query: str) -> bool:
    return _RUN_STATEMENT.search(_COMMENT.sub("", query)) is not None
