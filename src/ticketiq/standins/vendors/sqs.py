"""SQS FIFO stand-in speaking the AWS JSON 1.0 protocol: `SendMessage` only, as a producer sees SQS.

Every queue is FIFO without content-based deduplication: `MessageGroupId` and
`MessageDeduplicationId` (at most 128 characters) are required. A repeat of a dedup id on a queue
within the window (5 minutes by default) succeeds without enqueueing; whether it returns the original
`MessageId` is reported but unconfirmed, so it is an option. There is no way to list what was sent.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from fastapi import APIRouter, Request, Response

from ticketiq.standins.records import Answer, Effect, Session, Write
from ticketiq.standins.vendors.intake import IntakeDep, has_auth, json_body

VENDOR = "sqs"
DEDUP_ID_MAX = 128
_DEDUP_ID = re.compile(r"^[!-~]+$")  # alphanumerics and punctuation, as SQS allows
_SEQUENCE_BASE = 10**19
_TARGET = "AmazonSQS.SendMessage"


def router() -> APIRouter:
    api = APIRouter()

    async def send(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        queue = _queue_name(body.get("QueueUrl")) if isinstance(body, dict) else ""
        dedup_id = body.get("MessageDeduplicationId") if isinstance(body, dict) else None
        write = Write(VENDOR, "send_message", queue, dedup_id if isinstance(dedup_id, str) else None, body)
        target = request.headers.get("x-amz-target")
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _error(
                    403,
                    "com.amazon.coral.service#MissingAuthenticationTokenException",
                    "Request is missing Authentication Token",
                )
            if target != _TARGET:
                return _error(
                    400,
                    "com.amazon.coral.service#UnknownOperationException",
                    f"Operation {target!r} is not served here; only {_TARGET}.",
                )
            problem = _send_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            assert isinstance(dedup_id, str)
            message_id = str(uuid.uuid4())
            window = intake.options.sqs_dedupe_window_s
            claim = await session.claim(VENDOR, queue, dedup_id, message_id, window, body)
            if not claim.won:
                original = await session.fetch_one("standin.sqs_message_get", {"id": claim.ref})
                assert original is not None  # inserted in the transaction that claimed it
                shown = claim.ref if intake.options.sqs_duplicate_returns_original else message_id
                return Answer(200, _sent(shown, original["seq"], body["MessageBody"]), Effect.DEDUPED, claim.ref)
            row = await session.fetch_one(
                "standin.sqs_message_insert",
                {
                    "id": message_id,
                    "queue": queue,
                    "group_id": body["MessageGroupId"],
                    "deduplication_id": dedup_id,
                    "body": body["MessageBody"],
                },
            )
            assert row is not None
            return Answer(200, _sent(message_id, row["seq"], body["MessageBody"]), Effect.APPLIED, message_id)

        return await intake.write(write, apply)

    # The JSON protocol posts to the endpoint; accept the queue URL's own path too.
    api.add_api_route("", send, methods=["POST"])
    api.add_api_route("/", send, methods=["POST"])
    api.add_api_route("/{queue_path:path}", send, methods=["POST"])
    return api


def _queue_name(url: Any) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1] if isinstance(url, str) else ""


def _send_problem(body: Any) -> Answer | None:
    invalid = "com.amazonaws.sqs#InvalidParameterValue"
    missing = "com.amazonaws.sqs#MissingParameter"
    if not isinstance(body, dict):
        return _error(400, "com.amazonaws.sqs#SerializationException", "Request body is not a JSON object.")
    for name in ("QueueUrl", "MessageBody", "MessageGroupId"):
        if not isinstance(body.get(name), str) or not body[name]:
            return _error(400, missing, f"The request must contain the parameter {name}.")
    dedup_id = body.get("MessageDeduplicationId")
    if dedup_id is None:
        return _error(
            400,
            invalid,
            "The queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId provided explicitly",
        )
    if not isinstance(dedup_id, str) or not 0 < len(dedup_id) <= DEDUP_ID_MAX or not _DEDUP_ID.match(dedup_id):
        return _error(
            400,
            invalid,
            f"Value for parameter MessageDeduplicationId is invalid. Reason: it must be "
            f"1 to {DEDUP_ID_MAX} alphanumeric or punctuation characters.",
        )
    return None


def _error(status: int, kind: str, message: str) -> Answer:
    return Answer(status, {"__type": kind, "message": message}, Effect.REFUSED)


def _sent(message_id: str, seq: int, body: str) -> dict[str, Any]:
    return {
        "MessageId": message_id,
        "MD5OfMessageBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "SequenceNumber": str(_SEQUENCE_BASE + seq),
    }
