"""SQS FIFO: `SendMessage` over the AWS JSON 1.0 protocol, the step key as `MessageDeduplicationId`.

`TICKETIQ_SQS_URL` is the queue's URL; requests are posted to it. SQS dedupes a repeat for 5 minutes
and offers no way to list what was sent, so the tool is a plain write without a reader: an in-doubt
send is reported unknown, never resent (I9).
"""

from __future__ import annotations

import hashlib

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass
from ticketiq.tools.http import Send, request

VENDOR = "sqs"
DEDUP_ID_MAX = 128


def deduplication_id(key: str) -> str:
    return key if len(key) <= DEDUP_ID_MAX else hashlib.sha256(key.encode()).hexdigest()


def tools(settings: Settings) -> list[Tool]:
    params = {
        "type": "object",
        "properties": {
            "message_body": {"type": "string", "minLength": 1, "maxLength": 262144},
            "message_group_id": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"},
        },
        "required": ["message_body", "message_group_id"],
        "additionalProperties": False,
    }
    return [
        Tool(
            "sqs_send_message",
            "Send a message to the FIFO queue.",
            params,
            ToolClass.WRITE,
            send_message,
            vendor=VENDOR,
        )
    ]


async def send_message(ctx: CallContext) -> Outcome:
    queue = ctx.settings.sqs_url
    body = {
        "QueueUrl": queue,
        "MessageBody": ctx.args["message_body"],
        "MessageGroupId": ctx.args["message_group_id"],
        "MessageDeduplicationId": deduplication_id(ctx.key),
    }
    headers = {
        "X-Amz-Target": "AmazonSQS.SendMessage",
        "Content-Type": "application/x-amz-json-1.0",
        "Authorization": f"Bearer {ctx.settings.sqs_token}",
    }
    reply = await request(ctx, VENDOR, "POST", queue, send=Send.UNKEYED, headers=headers, json=body)
    return Outcome(
        ok=True,
        result={"message_id": reply.body["MessageId"], "sequence_number": reply.body.get("SequenceNumber")},
    )
