"""Every run's idempotency key (engine/run_keys.py), with no database: each maker's keys are in a
namespace of their own, and no key an API caller can send makes a key of any other namespace (I19)."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.auth import tokens
from ticketiq.engine import run_keys
from ticketiq.engine.run_keys import Expected, Namespace
from ticketiq.engine.step_keys import workflow_step_key
from ticketiq.intake import teams_inbox, ticket_events, webhook_triggers
from ticketiq.intake.idempotency import KEY_MAX_CHARS, key_problem
from ticketiq.storage.rows import Created

# What the API takes: a token's name (tokens.checked_name) and an Idempotency-Key (key_problem).
TOKEN_NAMES = st.from_regex(tokens._NAME, fullmatch=True)
API_KEYS = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=KEY_MAX_CHARS)
# What the other makers take: ids and names from outside, as wide as text goes (a tab or a `§` included).
ANY = st.text(min_size=1, max_size=80)
NO_TAB = ANY.filter(lambda s: "\t" not in s)
INSTANTS = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


def other_namespaces_keys() -> st.SearchStrategy[tuple[Namespace, str]]:
    """Keys every maker but the API makes, each with the namespace it is in."""
    return st.one_of(
        st.builds(lambda t, k: (Namespace.COPILOT, run_keys.copilot(t, k)), TOKEN_NAMES, API_KEYS),
        st.builds(lambda p, m: (Namespace.A2A, run_keys.a2a(p, m)), TOKEN_NAMES, ANY),
        st.builds(lambda s, at: (Namespace.CRON, run_keys.cron(s, at)), st.uuids().map(str), INSTANTS),
        st.builds(
            lambda w, s, n: (Namespace.WORKFLOW, run_keys.workflow_step(workflow_step_key(w, s, n))),
            st.uuids().map(str),
            ANY,
            st.integers(0, 10_000),
        ),
        st.builds(lambda t, d: (Namespace.WEBHOOK, webhook_triggers.run_key(t, d)), NO_TAB, ANY),
        st.builds(lambda i, a: (Namespace.TICKET_EVENT, ticket_events.run_key(i, a)), NO_TAB, ANY),
        st.builds(lambda c, a: (Namespace.TEAMS, teams_inbox.run_key(c, a)), ANY, ANY),
    )


@given(TOKEN_NAMES, API_KEYS, other_namespaces_keys())
def test_no_key_an_api_caller_can_send_makes_another_namespace_s_key(
    token: str, key: str, other: tuple[Namespace, str]
) -> None:
    assert tokens._NAME.fullmatch(token) and key_problem(key) is None  # what the API takes, and only that
    made = run_keys.api(token, key)
    namespace, theirs = other
    assert made != theirs
    assert run_keys.namespace(made) is Namespace.API
    assert run_keys.namespace(theirs) is namespace


@given(TOKEN_NAMES, API_KEYS, TOKEN_NAMES, API_KEYS)
def test_each_token_s_api_keys_are_its_own(token: str, key: str, other_token: str, other_key: str) -> None:
    # One key, one (token, key): the same key from two tokens makes two runs, never one the other can reach.
    same = run_keys.api(token, key) == run_keys.api(other_token, other_key)
    assert same == ((token, key) == (other_token, other_key))
    assert run_keys.copilot(token, key) != run_keys.api(token, key)


@given(other_namespaces_keys(), other_namespaces_keys())
def test_two_makers_keys_meet_only_when_they_are_the_same_maker_s(
    one: tuple[Namespace, str], two: tuple[Namespace, str]
) -> None:
    if one[0] is not two[0]:
        assert one[1] != two[1]


def test_the_old_printable_keys_a_caller_could_send_now_stay_in_the_api_namespace() -> None:
    fire = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    for printable in (f"cron:s1:{fire.isoformat()}", "copilot:ana:k-1", "a2a:ana:m-1", "tw" + "a" * 23):
        assert key_problem(printable) is None  # all of them an API caller could send before
        assert run_keys.namespace(run_keys.api("mallory", printable)) is Namespace.API
    assert run_keys.cron("s1", fire) == "cron\ts1\t2026-05-01T12:00:00+00:00"
    assert key_problem(run_keys.cron("s1", fire)) is not None  # the fire's key is no Idempotency-Key
    assert run_keys.namespace("cron:s1:2026-05-01T12:00:00+00:00") is None  # a key made before migration 020


def test_a_fire_s_key_is_its_instant_whatever_the_zone_it_is_given_in() -> None:
    at = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert run_keys.cron("s1", at.astimezone(ZoneInfo("America/New_York"))) == run_keys.cron("s1", at)
    assert run_keys.cron("s1", at) != run_keys.cron("s2", at) != run_keys.cron("s1", at + timedelta(minutes=1))


def test_a_part_holding_the_separator_is_refused_where_it_would_make_the_key_ambiguous() -> None:
    with pytest.raises(ValueError, match="tab"):
        run_keys.api("to\tken", "k")
    assert run_keys.a2a("ana", "message\twith a tab") == "a2a\tana\tmessage\twith a tab"  # the last part may


def test_every_namespace_is_named_in_the_module_s_docstring() -> None:
    doc = run_keys.__doc__ or ""
    assert all(f"`{n.value}`" in doc for n in Namespace)
    assert set(string.whitespace) & set("".join(n.value for n in Namespace)) == set()


CRON_RUN = Created("r1", "queued", False, None, "ops", channel="cron", agent="helper", made_by="schedule:s1")


def test_a_run_found_under_a_key_is_the_maker_s_only_when_it_is_what_the_maker_makes() -> None:
    fire = Expected(channel="cron", made_by="schedule:s1", agent="helper")
    assert run_keys.foreign(CRON_RUN, fire) is None
    squatted = Created("r2", "succeeded", False, None, "mallory", channel="api", agent="helper", made_by="mallory")
    why = run_keys.foreign(squatted, fire)
    assert why is not None and "r2" in why and "api" in why
    assert run_keys.foreign(Created("r3", "queued", False, None, "ops", channel="cron", agent="helper",
                                    made_by="schedule:s2"), fire) is not None  # fmt: skip
    assert run_keys.foreign(Created("r4", "queued", False, None, "ops", channel="cron", agent="other",
                                    made_by="schedule:s1"), fire) is not None  # fmt: skip
    # A field the maker does not name is not looked at.
    assert run_keys.foreign(squatted, Expected(channel="api", created_by="mallory")) is None
    assert run_keys.foreign(squatted, Expected(channel="api", created_by="ana")) is not None
