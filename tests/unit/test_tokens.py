"""Bearer tokens and who may do what: the pure rules behind every 401 and 403."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal, Role
from ticketiq.errors import RequestError


def test_a_minted_token_is_the_prefix_and_32_random_bytes_and_stored_as_its_sha256() -> None:
    made = {tokens.mint() for _ in range(100)}
    assert len(made) == 100
    for token in made:
        assert token.startswith("tiq_") and len(token) == 4 + 43  # 32 bytes, url-safe base64 unpadded
        assert tokens.well_formed(token)
        assert tokens.token_hash(token) == hashlib.sha256(token.encode()).hexdigest()
        assert tokens.matches(token, tokens.token_hash(token))


def test_a_token_matches_only_its_own_hash() -> None:
    token, other = tokens.mint(), tokens.mint()
    assert not tokens.matches(other, tokens.token_hash(token))
    assert not tokens.matches(token, token)  # the token is never what is stored
    assert not tokens.matches(token, "")


@pytest.mark.parametrize(
    "text", ["", "tiq_", "tiq_short", "TIQ_" + "a" * 43, "tiq_" + "a" * 42, "tiq_" + "a" * 44, "tiq_" + "a" * 42 + "="]
)
def test_anything_not_shaped_like_a_token_is_refused_before_the_database_is_asked(text: str) -> None:
    assert not tokens.well_formed(text)
    assert not tokens.well_formed(tokens.token_hash(tokens.mint()))


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer   ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer abc", "abc"),
        ("bearer abc", "abc"),
        ("BEARER  abc ", "abc"),
    ],
)
def test_the_bearer_scheme_is_read_in_any_case_and_nothing_else_is(header: str | None, token: str | None) -> None:
    assert tokens.bearer(header) == token


def test_a_caller_starts_runs_and_reads_its_own_only() -> None:
    assert tokens.GRANTED[Role.CALLER] == {Permission.START_RUNS, Permission.READ_OWN_RUNS}
    caller = Principal("cal", Role.CALLER, None)
    assert tokens.run_scope(caller) == "cal"
    assert tokens.run_scope(Principal("op", Role.OPERATOR, None)) is None
    assert tokens.run_scope(Principal("root", Role.ADMIN, frozenset({"a"}))) is None
    # A run is read under a scope when the scope's token started it, or under no scope at all.
    assert tokens.may_read("cal", "cal") and tokens.may_read("other", None) and tokens.may_read(None, None)
    assert not tokens.may_read("other", "cal") and not tokens.may_read(None, "cal")


def test_an_operator_also_stops_decides_and_reads_everything_and_only_an_admin_changes_gates_and_tokens() -> None:
    operator_only = {
        Permission.READ_EVERY_RUN,
        Permission.STOP_RUNS,
        Permission.HOLD_RUNS,
        Permission.DECIDE_APPROVALS,
        Permission.READ_AUDIT,
        Permission.READ_GATES,
        Permission.READ_SCHEDULES,
        Permission.INSPECT,
        Permission.READ_JOBS,
        Permission.RUN_JOBS,
    }
    assert tokens.GRANTED[Role.OPERATOR] - tokens.GRANTED[Role.CALLER] == operator_only
    assert tokens.GRANTED[Role.ADMIN] - tokens.GRANTED[Role.OPERATOR] == {
        Permission.CHANGE_GATES,
        Permission.MANAGE_TOKENS,
        Permission.MANAGE_SCHEDULES,
        Permission.MANAGE_TRIGGERS,
    }
    assert tokens.GRANTED[Role.ADMIN] == set(Permission)
    assert tokens.role_needed(Permission.STOP_RUNS) is Role.OPERATOR
    assert tokens.role_needed(Permission.MANAGE_TOKENS) is Role.ADMIN


@given(st.sampled_from(list(Role)), st.sampled_from(list(Role)), st.sampled_from(list(Permission)))
def test_a_higher_role_may_do_everything_a_lower_one_may(low: Role, high: Role, permission: Permission) -> None:
    if tokens.ROLES.index(low) <= tokens.ROLES.index(high) and tokens.may(low, permission):
        assert tokens.may(high, permission)


@given(st.sampled_from(list(Role)), st.sampled_from(list(Permission)))
def test_a_refusal_names_the_token_what_it_may_not_do_and_the_role_it_needs(role: Role, permission: Permission) -> None:
    refusal = tokens.refusal(Principal("someone", role, None), permission)
    if tokens.may(role, permission):
        assert refusal is None
    else:
        assert refusal == (
            f"token someone ({role}) may not {permission}: that needs the {tokens.role_needed(permission)} role "
            "or above"
        )


def test_a_token_starts_only_the_agents_it_names_and_every_agent_when_it_names_none() -> None:
    limited = Principal("cal", Role.CALLER, frozenset({"triage", "reader"}))
    assert tokens.may_start(limited, "triage")
    assert not tokens.may_start(limited, "writer")
    assert (
        tokens.start_refusal(limited, "writer") == "token cal may not start agent writer; it may start: reader, triage"
    )
    assert tokens.start_refusal(Principal("op", Role.OPERATOR, None), "anything") is None
    assert not tokens.may_start(Principal("none", Role.CALLER, frozenset()), "triage")


@pytest.mark.parametrize("name", ["bob", "ops-bot", "a.b_c@d", "x" * 100, "7"])
def test_a_name_that_can_be_an_actor_is_taken(name: str) -> None:
    assert tokens.checked_name(name) == name


@pytest.mark.parametrize("name", ["", "has space", "run:123", "-leading", "x" * 101, "tab\t", "é"])
def test_a_name_that_could_be_misread_as_an_actor_is_refused(name: str) -> None:
    with pytest.raises(RequestError, match="is not valid: use 1 to 100 letters") as refused:
        tokens.checked_name(name)
    assert refused.value.field == "body.name"


def test_a_role_is_one_of_the_three() -> None:
    assert tokens.checked_role("operator") is Role.OPERATOR
    with pytest.raises(RequestError, match="role 'root' is not one of caller, operator, admin"):
        tokens.checked_role("root")


def test_the_agents_of_a_token_are_known_agents_sorted_or_none_for_every_agent() -> None:
    known = ["triage", "reader", "writer"]
    assert tokens.checked_agents(None, known) is None
    assert tokens.checked_agents(["triage", " reader", "triage"], known) == ("reader", "triage")
    with pytest.raises(RequestError, match="name at least one agent"):
        tokens.checked_agents(["", " "], known)
    with pytest.raises(RequestError, match="no agent named nobody in the agents file; known: reader, triage, writer"):
        tokens.checked_agents(["triage", "nobody"], known)
