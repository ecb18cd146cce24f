"""The Teams inbox's decisions, pure and unit-tested: what a delivery is, what a turn's row says.

- A delivery is new, a redelivery of an activity the inbox holds (same conversation and activity id),
  or a content duplicate: Teams is reported to resend a slow turn under a new id, so an activity whose
  conversation, replyToId, sender and text (or card value) match one received within
  TICKETIQ_TEAMS_DEDUPE_S is the same turn. Neither a redelivery nor a duplicate stores or starts
  anything; a redelivery of a row whose process died before it made the run goes on making it.
- A row's status is never stored: it is read from its run (`turn_status`), and the reply from what the
  run's hand-on recorded when it ended (`reply_detail`, in the `agent.run.succeeded` audit).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

CHANNEL = "teams"
# A run's idempotency key for a Teams turn. The `§` is not printable ASCII, so no API caller's
# Idempotency-Key can ever be one (and take a turn's run before its activity comes).
RUN_KEY_PREFIX = "teams§"
_MENTION = re.compile(r"<at>.*?</at>", re.IGNORECASE | re.DOTALL)


class Intake(StrEnum):
    """What a delivery of an activity comes to."""

    NEW = "received"  # stored now; its run is made and started
    UNSTARTED = "unstarted"  # stored before, its run never made (its process died): made now
    REDELIVERED = "redelivered"  # the inbox holds this activity: nothing stored, nothing started
    DUPLICATE = "duplicate"  # the same content under another id within the window: likewise
    REFUSED = "refused"  # stored before, and no run can be made for it: nothing started


class TurnStatus(StrEnum):
    RECEIVED = "received"  # stored, its run not made yet
    RUNNING = "running"  # its run is queued, running, waiting or answered
    REPLIED = "replied"  # the run ended and its reply is posted
    FAILED = "failed"  # no reply: the reason says why


def run_key(conversation_id: str, activity_id: str) -> str:
    """The idempotency key of the run of this activity: each delivery of it finds the one run."""
    digest = hashlib.sha256(json.dumps([conversation_id, activity_id]).encode()).hexdigest()
    return RUN_KEY_PREFIX + digest[:48]


def content_hash(conversation_id: str, reply_to_id: str | None, from_id: str, text: str, value: Any = None) -> str:
    """What makes two activities the same turn, whatever their ids (VENDORS.md, Teams)."""
    said = json.dumps([conversation_id, reply_to_id or "", from_id, text, value], sort_keys=True, default=str)
    return hashlib.sha256(said.encode()).hexdigest()


def actor(from_id: str, aad_object_id: str | None) -> str:
    """Who a turn acts as: the Teams user (their Entra object id when Teams gives it). The `:` keeps it
    apart from every API token's name, which never holds one."""
    return f"teams:{aad_object_id or from_id}"


def turn_input(text: str | None, value: Any = None) -> str:
    """What the agent is asked: the message without its @mentions of the bot; a card's submitted value
    as JSON when the message has no text."""
    said = _MENTION.sub("", text or "").strip()
    if said:
        return said
    return json.dumps(value, sort_keys=True, default=str) if value is not None else ""


def intake(same_activity: tuple[bool, bool] | None, duplicate_of: str | None) -> Intake:
    """`same_activity`: (whether its run exists, whether it was refused) for the row holding this very
    activity, if any; `duplicate_of`: the id of an activity with the same content within the window."""
    if same_activity is not None:
        has_run, refused = same_activity
        if has_run:
            return Intake.REDELIVERED
        return Intake.REFUSED if refused else Intake.UNSTARTED
    if duplicate_of is not None:
        return Intake.DUPLICATE
    return Intake.NEW


def reply_detail(happened: str | None, result: Any) -> dict[str, Any]:
    """What the hand-on audits of the reply: posted (with its message id) or not, and why not."""
    out: dict[str, Any] = {"happened": happened}
    if isinstance(result, dict) and isinstance(result.get("id"), str) and "error" not in result:
        return {**out, "posted": True, "id": result["id"]}
    reason = None
    if isinstance(result, dict):
        reason = result.get("error") or result.get("refused") or result.get("message") or result.get("outcome")
    return {**out, "posted": False, "reason": str(reason or "no reply was posted")}


def turn_status(
    run_status: str | None, run_error: str | None, reply: Mapping[str, Any] | None, reason: str | None
) -> tuple[TurnStatus, str | None]:
    """A row's status and, when it failed, why: from its run and what the run's hand-on said."""
    if run_status is None:
        return (TurnStatus.FAILED, reason) if reason else (TurnStatus.RECEIVED, None)
    if run_status in ("failed", "interrupted", "stopped"):
        return TurnStatus.FAILED, run_error or f"the run {run_status}"
    if run_status != "succeeded":
        return TurnStatus.RUNNING, None
    if reply is not None and reply.get("posted") is True:
        return TurnStatus.REPLIED, None
    why = reply.get("reason") if reply is not None else None
    return TurnStatus.FAILED, str(why or "the run ended without a reply")
