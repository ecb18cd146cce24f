from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import fence_rules, fences
from tests.support.fence_rules import all_mutants, judge_mutant, problems
from tests.support.fences import Sql, read_functions, read_queries, read_statement
from ticketiq.storage.queries import QUERIES, parse


def test_named_blocks_are_split_by_name_and_area() -> None:
    text = "-- name: a\nSELECT 1;\n\n-- name: b\n-- a comment\nSELECT 2\n"
    assert parse(text, "x") == {"x.a": "SELECT 1", "x.b": "-- a comment\nSELECT 2"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x")


# The fence check reads each statement with Postgres's own parser (tests/support/fences.py) and judges it
# (tests/support/fence_rules.py): the attempt condition must be a top-level conjunct of the condition that
# selects the run's checkpoint row or the job's row (`attempt = %(attempt)s OR true` is not), a statement
# that reads its fence and then writes must lock the fence row, and the SQL functions of the migrations
# (their last definition) count too. The exemptions, each with its reason, are listed in fence_rules.py:
# NOT_AN_ATTEMPTS (statements no attempt makes), UNLOCKED_FENCES, DESIGN_LOCKS, MUST_FENCE and REDUNDANT.


@pytest.fixture(scope="module")
def sql() -> tuple[dict[str, Sql], dict[str, Sql]]:
    return read_queries(), read_functions()


def judged(text: str, functions: dict[str, Sql], name: str = "x.y") -> list[str]:
    return problems(read_statement(name, text, Path("x.sql"), text, 0), functions)


def test_every_statement_about_a_run_or_a_job_is_fenced_by_the_attempt(
    sql: tuple[dict[str, Sql], dict[str, Sql]],
) -> None:
    # I3: every statement a process makes about a run or a job carries the attempt as a conjunct, and
    # locks the row it read it from when it writes; a take (take_run, give_runs) is what raises it.
    queries, functions = sql
    assert set(queries) == set(QUERIES)  # the check reads what storage/queries.py loads
    wrong = {name: found for name, s in [*queries.items(), *functions.items()] if (found := problems(s, functions))}
    assert wrong == {}
    fenced = {name for name, s in queries.items() if fence_rules.fenced(s, functions)}
    assert {"runs.write_checkpoint", "runs.write_checkpoint_only", "runs.end", "calls.mark_in_doubt",
            "calls.record_outcome", "runs.hand_on", "approvals.file", "runs.audit", "jobs.finish",
            "knowledge.sync_page", "schedules.record_outcome"} <= fenced  # fmt: skip
    assert functions["seal_checkpoint"].fenced_by == 1  # its p_attempt


def test_no_exemption_is_stale(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    queries, functions = sql
    every = {**queries, **{f"fn:{name}": s for name, s in functions.items()}}
    for name in fence_rules.NOT_AN_ATTEMPTS:
        assert fence_rules.about(every[name], functions) is not None, f"{name} writes about no run or job"
        assert not fence_rules.fenced(every[name], functions), f"{name} is fenced: drop its exemption"
    for name in fence_rules.UNLOCKED_FENCES:
        assert any(c.in_select and c.lock is None for c in every[name].conditions), name
    for name in [*fence_rules.DESIGN_LOCKS, *fence_rules.MUST_FENCE, *fence_rules.REDUNDANT]:
        assert name in every, name


def test_the_attempt_condition_must_be_a_conjunct_not_a_substring(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]
    fenced = "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND attempt = %(attempt)s"
    assert judged(fenced, functions) == []
    or_true = "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND (attempt = %(attempt)s OR true)"
    assert any("not a top-level conjunct" in p for p in judged(or_true, functions))
    negated = "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND NOT (attempt = %(attempt)s)"
    assert any("not a top-level conjunct" in p for p in judged(negated, functions))
    dropped = "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s"
    assert judged(dropped, functions) == ["writes about a job without an attempt condition (I3)"]
    # Another parameter, or the attempt written only as a value, fences nothing.
    other = "UPDATE checkpoints SET step = 1 WHERE run_id = %(run_id)s AND attempt = %(step)s"
    assert judged(other, functions) == ["writes about a run without an attempt condition (I3)"]
    commented = "UPDATE calls SET status = 'done' WHERE run_id = %(run_id)s -- AND attempt = %(attempt)s"
    assert judged(commented, functions) == ["writes about a run without an attempt condition (I3)"]


def test_a_fence_read_before_a_write_must_lock_the_fence_row(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]
    read_then_write = (
        "WITH fence AS (SELECT c.run_id FROM checkpoints c JOIN runs r ON r.id = c.run_id "
        "WHERE c.run_id = %(run_id)s AND c.attempt = %(attempt)s {lock}) "
        "INSERT INTO transcripts (run_id, kind, body) SELECT fence.run_id, 'x', '{{}}' FROM fence"
    )
    assert judged(read_then_write.format(lock="FOR SHARE"), functions) == []
    assert judged(read_then_write.format(lock="FOR UPDATE OF r FOR SHARE OF c"), functions) == []
    for weak in ("", "FOR KEY SHARE", "FOR UPDATE OF r"):
        found = judged(read_then_write.format(lock=weak), functions)
        assert any("without FOR SHARE / FOR UPDATE on c" in p for p in found), weak
    # A read alone needs no lock; an UPDATE's own WHERE re-checks the row it waited for.
    assert judged("SELECT now() FROM jobs WHERE id = %(job_id)s AND attempt = %(attempt)s", functions) == []


def test_the_discovery_sees_what_writes_about_a_run_or_a_job(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]

    def about(text: str) -> str | None:
        return fence_rules.about(read_statement("x.y", text, Path("x.sql"), text, 0), functions)

    assert about("UPDATE calls SET status = 'done' WHERE run_id = %(run_id)s") == "run"
    assert about("DELETE FROM leases WHERE name = 'checkpoint:' || %(run_id)s") == "run"
    assert about("DELETE FROM leases WHERE name = 'job:' || %(job_id)s") == "job"
    assert about("DELETE FROM leases WHERE name = 'leader' AND holder = %(holder)s") is None
    assert about("INSERT INTO audit_log (action, run_id, actor, detail) VALUES ('gate.changed', NULL, 1, 2)") is None
    assert about("INSERT INTO audit_log (action, run_id, actor, detail) VALUES (%(a)s, %(run_id)s, 1, 2)") == "run"
    assert about("SELECT seal_checkpoint(%(run_id)s, %(attempt)s, 1, 's', 's', 'k', NULL, 0)") == "run"
    assert about("INSERT INTO knowledge (source, key) VALUES ('jira', 'OPS-1')") == "job"
    # Through a fenced function, with the attempt where the function compares it.
    call = "SELECT seal_checkpoint(%(run_id)s, {}, 1, 's', 's', 'k', NULL, 0)"
    assert judged(call.format("%(attempt)s"), functions) == []
    assert judged(call.format("%(step)s"), functions) == ["writes about a run without an attempt condition (I3)"]


def test_a_function_is_read_at_its_last_definition(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]
    folder = Path(fences.__file__).resolve().parents[2] / "src" / "ticketiq" / "storage" / "migrations"
    defining = sorted(p.name for p in folder.glob("*.sql")
                      if re.search(r"CREATE (OR REPLACE )?FUNCTION take_run\(", p.read_text()))  # fmt: skip
    assert functions["take_run"].path.name == defining[-1]
    assert len(defining) > 1  # redefined: an earlier definition does not count


def test_every_mutant_of_every_fence_is_caught_by_the_check() -> None:
    # `make mutants` breaks each fence in turn and runs the behaviour tests that guard it; each of those
    # mutants is also one this check refuses: the attempt conjunct dropped, made `OR true`, or the row
    # lock dropped, in every fenced statement and SQL function.
    mutants = all_mutants()
    assert {m.kind for m in mutants} == {"dropped", "or_true", "unlocked"}
    assert {"fn:seal_checkpoint", "calls.mark_in_doubt", "runs.lock", "knowledge.sync_page"} <= {
        m.target for m in mutants
    }
    missed = [m.key for m in mutants if not judge_mutant(m)]
    assert missed == []
