"""I20, checked statically over every statement of storage/queries/*.sql (tests/support/durable_rules.py):
each found-it statement calls durable() (migration 026) in the target list of the SELECT that returns the
row it found, so it runs once per row found and never on the path that finds nothing; no other statement
calls it, so nothing else pays a commit that waits for the standby.

Behaviour: tests/integration/test_found_it_waits.py (each statement's found row is made durable, through
its store, read from the WAL) and test_visible_not_durable.py (a real standby: the retry waits, and the
row it would have answered from is lost in the failover); `make mutants` drops each call against them.
"""

from __future__ import annotations

from tests.mutants.guards import GUARDS
from tests.support.durable_rules import (
    DURABLE_MIGRATION,
    FOUND_IT,
    WRITES_ALREADY,
    durable_calls,
    durable_mutants,
    judge_durable,
    problems,
    read_statements,
)
from ticketiq.storage.migrate import FOLDER
from ticketiq.storage.queries import QUERIES


def test_every_found_it_statement_makes_its_row_durable_and_no_other_statement_pays_for_it() -> None:
    statements = read_statements()
    assert set(statements) == set(QUERIES)
    assert {name: found for name, (_, _, sql) in statements.items() if (found := problems(name, sql))} == {}
    calling = {name for name, (_, _, sql) in statements.items() if durable_calls(sql)}
    assert calling == set(FOUND_IT)


def test_the_audit_names_statements_that_exist_each_once() -> None:
    assert set(FOUND_IT) <= set(QUERIES)
    assert set(WRITES_ALREADY) <= set(QUERIES)
    assert not set(FOUND_IT) & set(WRITES_ALREADY)


def test_a_call_that_is_misplaced_or_undeclared_is_refused() -> None:
    assert problems("idempotency.get", "SELECT k, durable() FROM idempotency_keys WHERE key = %(key)s") == []
    # In a WHERE it may run on rows the statement then drops, or, folded with a constant, not at all.
    where = problems("idempotency.get", "SELECT k FROM idempotency_keys WHERE key = %(key)s AND durable()")
    assert any("outside a SELECT's target list" in p for p in where)
    assert any("without durable()" in p for p in problems("idempotency.get", "SELECT k FROM idempotency_keys"))
    undeclared = problems("runs.create", "SELECT id, durable() FROM runs WHERE id = %(id)s")
    assert any("no declared found-it statement" in p for p in undeclared)
    # A branch of a UNION, or a sub-select of the target list, is a target list of its own.
    union = "SELECT 1 AS x, NULL::boolean AS d UNION ALL SELECT 2, durable() FROM jobs WHERE id = %(id)s"
    assert durable_calls(union) == [True]


def test_every_durable_mutant_is_refused_by_the_check_and_guarded_by_behaviour() -> None:
    mutants = durable_mutants()
    dropped = [m for m in mutants if m.kind == "not_durable"]
    assert {m.target for m in dropped} == set(FOUND_IT)
    assert [m.key for m in dropped if not judge_durable(m)] == []
    # durable() itself, weakened: an id alone, or a message with no id. Only behaviour can tell.
    assert {m.kind for m in mutants if m.target == "fn:durable"} == {"xid_only", "not_transactional"}
    assert {m.target for m in mutants} <= set(GUARDS)


def test_durable_is_defined_once_by_its_migration() -> None:
    defining = [p.name for p in sorted(FOLDER.glob("*.sql")) if "FUNCTION durable()" in p.read_text()]
    assert defining == [DURABLE_MIGRATION.name]
