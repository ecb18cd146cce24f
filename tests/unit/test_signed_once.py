"""I19, a signed request counts once: what is claimed, how long, and what a claim's answer decides. Pure,
no database."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.auth.webhook_signature import TOLERANCE_S, Verdict, check_delivery, header_for
from ticketiq.intake import signed_once, webhook_triggers
from ticketiq.intake.signed_once import JIRA_SOURCE, Outcome, decide, ticket_event_claim, webhook_claim

NOW = 1_700_000_000
SECRET, OTHER = b"first-secret-0123456789", b"second-secret-0123456789"
BODY = b'{"ticket": "OPS-12", "text": "checkout fails"}'

ids = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=20)


@pytest.mark.parametrize(
    ("bound_to", "started", "purged", "outcome"),
    [
        ("d-1", False, False, Outcome.NEW),  # the first copy, or its retry after a crash before it recorded
        ("d-1", True, False, Outcome.REDELIVERY),  # the sender's redelivery (re-signed or not)
        ("d-0", False, False, Outcome.REPLAY),  # the same signed content, first under d-0
        ("d-0", True, False, Outcome.REPLAY),  # d-1 started its own run, but this content is d-0's
        ("d-1", False, True, Outcome.PURGED),  # d-1's run was purged since: its record went with it
        ("d-0", False, True, Outcome.REPLAY),  # still d-0's content, whatever became of d-1
    ],
)
def test_what_a_claim_is_bound_to_and_what_the_id_started_decide(
    bound_to: str, started: bool, purged: bool, outcome: Outcome
) -> None:
    assert decide("d-1", bound_to, started, purged) is outcome


@given(delivery=ids, other=ids, started=st.booleans())
def test_only_the_id_a_claim_is_bound_to_may_start_anything(delivery: str, other: str, started: bool) -> None:
    outcome = decide(delivery, other, started)
    assert (outcome is Outcome.REPLAY) == (delivery != other)
    assert (outcome is Outcome.NEW) == (delivery == other and not started)


def test_a_webhook_claim_covers_what_was_signed_and_nothing_the_sender_chose() -> None:
    claim = webhook_claim("deploys", str(NOW), BODY, "d-1")
    assert claim.source == "trigger:deploys" != JIRA_SOURCE
    # The delivery id is not signed: it is what the claim is bound to, not part of what is claimed.
    assert webhook_claim("deploys", str(NOW), BODY, "forged").digest == claim.digest
    # Another trigger, t or body is other signed content.
    assert len({claim.digest, webhook_claim("other", str(NOW), BODY, "d-1").digest,
                webhook_claim("deploys", str(NOW + 1), BODY, "d-1").digest,
                webhook_claim("deploys", str(NOW), BODY + b" ", "d-1").digest}) == 4  # fmt: skip


@given(skew=st.integers(-int(TOLERANCE_S), int(TOLERANCE_S)), body=st.binary(min_size=1, max_size=100))
def test_a_webhook_claim_is_kept_until_its_signature_is_refused_as_stale(skew: int, body: bytes) -> None:
    # Any signature accepted now has its claim kept past the last moment it can be accepted: a copy
    # arriving once the claim may be purged is refused before it could claim again.
    at = NOW + skew
    header = header_for([SECRET], at, body)
    assert check_delivery(header, body, [SECRET], NOW).accepted
    claim = webhook_claim("deploys", str(at), body, "d-1")
    assert claim.kept_until_s is not None and claim.kept_until_s >= at + TOLERANCE_S + 60
    assert check_delivery(header, body, [SECRET], claim.kept_until_s).verdict is Verdict.STALE


def test_a_webhook_signed_with_every_secret_of_a_rotation_is_one_signed_request() -> None:
    # Which secrets signed it (one v1 each) is not what was signed: t and the body are.
    with_one = check_delivery(header_for([SECRET], NOW, BODY), BODY, [SECRET, OTHER], NOW)
    with_both = check_delivery(header_for([SECRET, OTHER], NOW, BODY), BODY, [SECRET, OTHER], NOW)
    assert with_one.timestamp == with_both.timestamp == str(NOW)
    assert webhook_claim("t", str(NOW), BODY, "a").digest == webhook_claim("t", str(NOW), BODY, "b").digest


def test_a_ticket_event_claim_is_its_body_kept_as_long_as_the_events() -> None:
    claim = ticket_event_claim("ev-1", BODY)
    assert (claim.source, claim.delivery_id, claim.kept_until_s) == (JIRA_SOURCE, "ev-1", None)
    assert claim.digest == ticket_event_claim("forged", BODY).digest != ticket_event_claim("ev-1", BODY + b" ").digest


def test_a_replay_is_told_which_delivery_came_first_and_to_sign_each_delivery() -> None:
    message = signed_once.replay_message("d-0")
    assert "delivered already as delivery d-0" in message and "sign each new delivery" in message


def test_what_binds_a_made_thing_to_its_request_is_the_token_and_the_key() -> None:
    key = webhook_triggers.request_key("root", "POST /v1/triggers\nk-1")
    assert key is not None and uuid.UUID(key).version == 5
    assert key == webhook_triggers.request_key("root", "POST /v1/triggers\nk-1")
    others = {webhook_triggers.request_key("root2", "POST /v1/triggers\nk-1"),
              webhook_triggers.request_key("root", "POST /v1/triggers\nk-2"),
              webhook_triggers.request_key("root", "POST /v1/triggers/{name}/secrets\nk-1")}  # fmt: skip
    assert key not in others and len(others) == 3
    assert webhook_triggers.request_key("root", None) is None  # without a key, as before
