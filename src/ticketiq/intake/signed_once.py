"""I19: a signed request counts once, whatever delivery id it comes with. Pure, no I/O.

A sender's delivery id (`X-TicketIQ-Delivery`, Jira's `X-Atlassian-Webhook-Identifier`) is not signed:
whoever saw one signed request could send it again under ids of their own. So every accepted signed
request claims what was signed, keyed by (source, digest), bound to the delivery id it first came with.
The claim is one conditional statement made right after the signature verified and before anything
else is stored: of two copies racing, one binds it. What it is bound to, and whether this delivery id
started something already, decide:

| the claim is bound to | this delivery id started | outcome |
| --- | --- | --- |
| this delivery id | nothing yet | NEW: start it (a retry after a crash finds what it made by its run keys) |
| this delivery id | its run(s) | REDELIVERY: answer them (a ticket event starts what a crash left unmade) |
| another delivery id | anything | REPLAY: start nothing |

A delivery re-signed by its sender (a new `t`, the same id) is new signed content bound to the same id:
a redelivery, the same run. What is claimed:

- a webhook trigger: source `trigger:<name>`, digest SHA-256 over (trigger, t, body) as signed. Kept
  while the signature could still be accepted (t within the window, plus a margin); the leader purges it
  after, when a copy is refused as stale anyway.
- a Jira ticket event: source `jira`, digest the raw body's SHA-256 (Jira signs no timestamp). Kept as
  long as the ticket events.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum

from ticketiq.auth import webhook_signature
from ticketiq.intake import ticket_events, webhook_triggers

JIRA_SOURCE = "jira"  # no trigger's source: those are `trigger:<name>`
# How long past a webhook signature's window its claim is kept: a copy checked just inside the window
# makes its claim a moment later, while the first copy's claim must still be there.
KEPT_MARGIN_S = 300.0


class Outcome(StrEnum):
    NEW = "new"
    REDELIVERY = "redelivery"
    REPLAY = "replay"
    PURGED = "purged"  # delivered before, its run purged since (issue 34): starts nothing again


@dataclass(frozen=True)
class SignedClaim:
    """What a signed request claims: its source and digest, bound to `delivery_id`."""

    source: str
    digest: str
    delivery_id: str
    kept_until_s: float | None  # epoch seconds, by the database clock; None: never purged


def webhook_claim(trigger: str, timestamp: str, body: bytes, delivery_id: str) -> SignedClaim:
    """A webhook delivery's claim: the trigger with what its sender signed, `<t>.<raw body>`."""
    # Trigger names hold no newline: the trigger and the signed payload cannot run into each other.
    signed = trigger.encode() + b"\n" + webhook_signature.signed_payload(timestamp, body)
    kept_until = int(timestamp) + webhook_signature.TOLERANCE_S + KEPT_MARGIN_S
    return SignedClaim(webhook_triggers.actor(trigger), hashlib.sha256(signed).hexdigest(), delivery_id, kept_until)


def ticket_event_claim(identifier: str, body: bytes) -> SignedClaim:
    """A Jira ticket event's claim: its raw body, which is all Jira signs."""
    return SignedClaim(JIRA_SOURCE, ticket_events.body_digest(body), identifier, None)


def decide(delivery_id: str, bound_to: str, started: bool, purged: bool = False) -> Outcome:
    """See the module's table. `bound_to`: the delivery id the claim answered with (this one when it
    was this request's, or a retry's of it); `started`: whether this delivery id recorded its run(s);
    `purged`: whether the run it started was purged since (its record went with it)."""
    if bound_to != delivery_id:
        return Outcome.REPLAY
    if started:
        return Outcome.REDELIVERY
    return Outcome.PURGED if purged else Outcome.NEW


def purged_message(delivery_id: str) -> str:
    """What a sender is told when its delivery's run was purged by the retention policy."""
    return (
        f"delivery {delivery_id} started a run that the retention policy has since purged; it starts nothing "
        "again: send a new delivery (a new id) to start a new run"
    )


def replay_message(first: str) -> str:
    """What a webhook sender is told when its request was delivered already under another id."""
    return (
        f"the signed request was delivered already as delivery {first}; it starts nothing: sign each new "
        "delivery (a new t and signature)"
    )
