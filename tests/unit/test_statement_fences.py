"""I3, checked statically over every statement of every `.sql` file under storage/queries/ and every SQL
function of the migrations (its last definition), by the tables each writes: a run's rows fenced by the
run's attempt, a job's rows by the job fence (`job_holds`, migration 025), the leader's and the
processes' own rows by the holder's identity; every other table listed with why it needs no fence. The
statements are read with Postgres's own parser (tests/support/fences.py) and judged by
tests/support/fence_rules.py, where each exemption stands with its reason: UNFENCED (tables),
NOT_AN_ATTEMPTS and NOT_THE_HOLDERS (statements), UNLOCKED_FENCES, DESIGN_LOCKS, MUST_FENCE, REDUNDANT.

Behaviour tests (tests/integration/test_fence_*.py, test_workflow_fencing.py, test_interrupted_jobs.py)
show each fence holding on the real Postgres, and `make mutants` breaks each in turn against them; this
finds a statement that forgot its fence, or wrote it so that it fences nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import fence_rules, fences
from tests.support.fence_rules import all_mutants, judge_mutant, problems
from tests.support.fences import Sql, read_functions, read_queries, read_statement
from ticketiq.storage.queries import QUERIES, parse

QUERY_FILES = Path(fences.__file__).resolve().parents[2] / "src" / "ticketiq" / "storage" / "queries"


def test_named_blocks_are_split_by_name_and_area() -> None:
    text = "-- name: a\nSELECT 1;\n\n-- name: b\n-- a comment\nSELECT 2\n"
    assert parse(text, "x") == {"x.a": "SELECT 1", "x.b": "-- a comment\nSELECT 2"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x")


@pytest.fixture(scope="module")
def sql() -> tuple[dict[str, Sql], dict[str, Sql]]:
    return read_queries(), read_functions()


def judged(text: str, functions: dict[str, Sql], name: str = "x.y") -> list[str]:
    return problems(read_statement(name, text, Path("x.sql"), text, 0), functions)


def test_every_statement_of_every_file_is_judged_by_the_tables_it_writes(
    sql: tuple[dict[str, Sql], dict[str, Sql]],
) -> None:
    # I3: every statement a process makes about a run or a job carries the attempt as a conjunct (a job's
    # through job_holds), and locks the row it read it from when it writes; a take (take_run, give_runs,
    # jobs.claim) is what raises it. The leader's and a process's own rows carry the holder's identity.
    queries, functions = sql
    assert set(queries) == set(QUERIES)  # the check reads what storage/queries.py loads: every file
    assert {name.split(".")[0] for name in queries} == {p.stem for p in QUERY_FILES.glob("*.sql")}
    wrong = {name: found for name, s in [*queries.items(), *functions.items()] if (found := problems(s, functions))}
    assert wrong == {}
    # Every table written is classified: a fence family, or why it needs none.
    every = [*queries.values(), *functions.values()]
    assert [(s.name, fence_rules.unclassified(s)) for s in every if fence_rules.unclassified(s)] == []
    fenced = {name for name, s in queries.items() if fence_rules.fenced(s, functions)}
    assert {"runs.write_checkpoint", "runs.write_checkpoint_only", "runs.end", "calls.mark_in_doubt",
            "calls.record_outcome", "runs.hand_on", "approvals.file", "runs.audit", "jobs.finish",
            "knowledge.sync_page", "schedules.record_outcome", "fine_tune.mark_in_doubt", "fine_tune.clock",
            "classifiers.record", "red_team.record_answer"} <= fenced  # fmt: skip
    assert functions["seal_checkpoint"].fenced_by == 1  # its p_attempt
    # The reads the jobs need that are not about the job write nothing, and need no fence.
    for read in ("classifiers.knowledge_rows", "fine_tune.knowledge_issues", "knowledge.search", "knowledge.count"):
        assert queries[read].writes == set(), read


def test_each_family_is_found_by_the_tables_it_writes(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    queries, functions = sql
    family = {name: fence_rules.families(s, functions) for name, s in queries.items()}
    assert family["runs.end"] == {"run"}
    assert family["knowledge.sync_page"] == family["red_team.record_answer"] == {"job"}
    for name in ("classifiers.record", "workflows.step_begun", "fine_tune.mark_in_doubt"):
        assert family[name] == {"job"}, name
    assert family["leader.step_down"] == family["leader.lead"] == family["leases.renew"] == {"leader"}
    assert family["leader.drain"] == {"run", "leader"}  # its own row, and the runs it gives back
    assert family["gates.set_channel"] == family["tokens.create"] == frozenset()


def test_the_job_fence_is_written_once_and_every_job_statement_uses_it(
    sql: tuple[dict[str, Sql], dict[str, Sql]],
) -> None:
    queries, functions = sql
    fence = functions[fence_rules.JOB_FENCE]
    assert fence.path.name == "025_job_fence.sql" and fence.fence_row == "job" and fence.fenced_by == 2
    # Its id, its attempt, and still running: a job swept `interrupted` or queued again keeps its attempt.
    assert [text for _, text in fence.row_conjuncts] == ["job.id = job_id", "job.attempt = attempt",
                                                         "job.status = 'running'"]  # fmt: skip
    # Every statement a running job makes about itself (the worker's, the kinds', the workflow's) is
    # fenced through it, on its own job id, and none writes the fence out by hand.
    by_fence = {name for name, s in queries.items()
                if any(c.via == fence_rules.JOB_FENCE and c.conjunct for c in s.conditions)}  # fmt: skip
    assert by_fence == {"jobs.save", "jobs.finish", "jobs.hand_back", "jobs.unclaim", "knowledge.sync_page",
                        "fine_tune.mark_in_doubt", "fine_tune.clock", "classifiers.record", "red_team.record_answer",
                        "workflows.step_begun", "workflows.step_ended", "workflows.in_flight_for"}  # fmt: skip
    for name in by_fence - {"jobs.hand_back", "jobs.unclaim"}:
        (c,) = queries[name].conditions
        assert c.args[1:] == ("%(job_id)s", "%(attempt)s"), name
    for name in ("jobs.hand_back", "jobs.unclaim"):  # each held job under the attempt the process names
        (c,) = queries[name].conditions
        assert c.args == ("j", "h.job_id", "h.attempt"), name
    by_hand = {name for name, s in queries.items() if any(c.table == "jobs" and c.via is None for c in s.conditions)}
    assert by_hand == set()
    # The workflow's statements: those that write, and the in-flight read, each fenced (no other writes).
    writing = {name for name, s in queries.items() if name.startswith("workflows.") and s.writes}
    assert writing == {"workflows.step_begun", "workflows.step_ended"}


def test_no_exemption_is_stale(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    queries, functions = sql
    every = {**queries, **{f"fn:{name}": s for name, s in functions.items()}}
    for name in fence_rules.NOT_AN_ATTEMPTS:
        assert fence_rules.about(every[name], functions) is not None, f"{name} writes about no run or job"
        assert not fence_rules.fenced(every[name], functions), f"{name} is fenced: drop its exemption"
    for name in fence_rules.NOT_THE_HOLDERS:
        assert "leader" in fence_rules.families(every[name], functions), f"{name} writes no leader's row"
        assert not any(h.conjunct for h in every[name].holders), f"{name} carries its holder: drop its exemption"
    for name in fence_rules.UNLOCKED_FENCES:
        assert any(c.in_select and c.lock is None for c in every[name].conditions), name
    for name in [*fence_rules.DESIGN_LOCKS, *fence_rules.MUST_FENCE, *fence_rules.REDUNDANT]:
        assert name in every, name
    written = {table for s in every.values() for table in s.writes}
    assert set(fence_rules.UNFENCED) <= written, set(fence_rules.UNFENCED) - written
    assert not set(fence_rules.UNFENCED) & set(fence_rules.FAMILIES)


def test_the_attempt_condition_must_be_a_conjunct_not_a_substring(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]
    fenced = "UPDATE jobs SET state = %(state)s WHERE job_holds(jobs, %(job_id)s, %(attempt)s)"
    assert judged(fenced, functions) == []
    or_true = "UPDATE jobs SET state = %(state)s WHERE (job_holds(jobs, %(job_id)s, %(attempt)s) OR true)"
    assert any("not a top-level conjunct" in p for p in judged(or_true, functions))
    negated = "UPDATE jobs SET state = %(state)s WHERE NOT job_holds(jobs, %(job_id)s, %(attempt)s)"
    assert any("not a top-level conjunct" in p for p in judged(negated, functions))
    dropped = "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s"
    assert judged(dropped, functions) == ["writes about a job without an attempt condition (I3)"]
    # The same for a run's attempt, written out on its checkpoint row.
    run = "UPDATE checkpoints SET step = 1 WHERE run_id = %(run_id)s AND attempt = %(attempt)s"
    assert judged(run, functions) == []
    run_or_true = "UPDATE checkpoints SET step = 1 WHERE run_id = %(run_id)s AND (attempt = %(attempt)s OR true)"
    assert any("not a top-level conjunct" in p for p in judged(run_or_true, functions))
    # Another parameter, or the attempt written only as a value, fences nothing.
    other = "UPDATE checkpoints SET step = 1 WHERE run_id = %(run_id)s AND attempt = %(step)s"
    assert judged(other, functions) == ["writes about a run without an attempt condition (I3)"]
    other_job = "UPDATE jobs SET state = %(state)s WHERE job_holds(jobs, %(job_id)s, %(done)s)"
    assert judged(other_job, functions) == ["writes about a job without an attempt condition (I3)"]
    commented = "UPDATE calls SET status = 'done' WHERE run_id = %(run_id)s -- AND attempt = %(attempt)s"
    assert judged(commented, functions) == ["writes about a run without an attempt condition (I3)"]


def test_the_job_fence_is_never_written_out_by_hand_nor_given_another_job(
    sql: tuple[dict[str, Sql], dict[str, Sql]],
) -> None:
    functions = sql[1]
    # A hand-written fence (and one without `running`, which a job swept `interrupted` would pass) is refused.
    for by_hand in ("UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND attempt = %(attempt)s",
                    "UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND attempt = %(attempt)s "
                    "AND status = 'running'"):  # fmt: skip
        assert any("writes the job fence out by hand" in p for p in judged(by_hand, functions)), by_hand
    other = "UPDATE jobs SET state = %(state)s WHERE job_holds(jobs, %(parent_id)s, %(attempt)s)"
    assert any("fences some job other than its own" in p for p in judged(other, functions))
    # A step's row written without the job fence at all (the workflow's statements once forgot it).
    assert judged("INSERT INTO workflow_steps (job_id) VALUES (%(job_id)s)", functions) == [
        "writes about a job without an attempt condition (I3)"
    ]


def test_the_leaders_rows_are_fenced_by_the_holder(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    functions = sql[1]
    assert judged("DELETE FROM leases WHERE name = 'leader' AND holder = %(holder)s", functions) == []
    for unfenced in ("DELETE FROM leases WHERE name = 'leader'",
                     "DELETE FROM leases WHERE name = 'leader' AND (holder = %(holder)s OR true)",
                     "UPDATE processes SET ended_at = now() WHERE ended_at IS NULL",
                     "UPDATE leases SET expires_at = now() WHERE holder = %(other)s"):  # fmt: skip
        assert any("without the holder's identity" in p for p in judged(unfenced, functions)), unfenced
    assert judged("UPDATE processes SET ended_at = now() WHERE id = %(id)s", functions) == []


def test_a_table_no_family_names_is_refused(sql: tuple[dict[str, Sql], dict[str, Sql]]) -> None:
    assert judged("INSERT INTO new_things (x) VALUES (1)", sql[1]) == [
        "writes new_things, which names no fence (FAMILIES) nor why it needs none (UNFENCED)"
    ]


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
    # The job fence locks nothing: a statement that reads it before writing locks the job's row itself.
    job_read_then_write = (
        "WITH fence AS (SELECT id FROM jobs WHERE job_holds(jobs, %(job_id)s, %(attempt)s) {lock}) "
        "INSERT INTO red_team_answers (job_id, idx) SELECT fence.id, 1 FROM fence"
    )
    assert judged(job_read_then_write.format(lock="FOR SHARE"), functions) == []
    assert any("without FOR SHARE / FOR UPDATE on jobs" in p for p in judged(job_read_then_write.format(lock=""),
                                                                                functions))  # fmt: skip
    # A read alone needs no lock; an UPDATE's own WHERE re-checks the row it waited for.
    assert judged("SELECT now() FROM jobs WHERE job_holds(jobs, %(job_id)s, %(attempt)s)", functions) == []


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
    # mutants is also one this check refuses: the attempt conjunct dropped, made `OR true`, the row lock
    # dropped, in every fenced statement and SQL function, and the job fence's `running` dropped.
    mutants = all_mutants()
    assert {m.kind for m in mutants} == {"dropped", "or_true", "unlocked", "not_running"}
    targets = {m.target for m in mutants}
    assert {"fn:seal_checkpoint", "fn:job_holds", "calls.mark_in_doubt", "runs.lock", "knowledge.sync_page",
            "fine_tune.clock", "classifiers.record", "red_team.record_answer"} <= targets  # fmt: skip
    assert {m.kind for m in mutants if m.target == "fn:job_holds"} == {"dropped", "or_true", "not_running"}
    missed = [m.key for m in mutants if not judge_mutant(m)]
    assert missed == []
