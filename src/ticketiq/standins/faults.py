"""Faults a stand-in injects on request, so adapters and trials meet the failures real vendors have.

`429` and `500` answer before the request is applied (the vendor did not take it); `stall` sleeps and
then applies normally (a client that timed out cannot know the write landed); `hold` applies and records
the write at once and then holds the answer for `stall_s` (the client that sent it can be killed while it
waits: the write landed and no answer reached anyone); `500_after_apply` applies the write and then answers
500, the purest uncertain outcome.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ticketiq.standins.records import Answer, Effect

Vendor = Literal["incidentio", "jira", "teams", "graph", "discord", "sqs", "webhook", "openai", "mcp"]
FaultMode = Literal["429", "500", "stall", "hold", "500_after_apply"]


class Fault(BaseModel):
    """One injected fault: applies to the next `count` requests of `vendor` (and `operation`, if given)."""

    model_config = ConfigDict(extra="forbid")

    vendor: Vendor
    mode: FaultMode
    count: int = Field(default=1, ge=1)
    retry_after_s: float = Field(default=1.0, ge=0)
    stall_s: float = Field(default=0.0, ge=0)
    operation: str | None = None

    def matches(self, vendor: str, operation: str) -> bool:
        return self.vendor == vendor and self.operation in (None, operation)


class FaultBook:
    """The faults waiting to be applied. Taking one is synchronous, so two concurrent requests on one
    event loop never both take the last count."""

    def __init__(self, faults: Iterable[Fault] = ()) -> None:
        self._faults = [f.model_copy() for f in faults]

    def add(self, fault: Fault) -> None:
        self._faults.append(fault.model_copy())

    def clear(self) -> None:
        self._faults.clear()

    def pending(self) -> list[Fault]:
        return [f.model_copy() for f in self._faults]

    def take(self, vendor: str, operation: str) -> Fault | None:
        for fault in self._faults:
            if fault.matches(vendor, operation):
                taken = fault.model_copy()
                fault.count -= 1
                if fault.count == 0:
                    self._faults.remove(fault)
                return taken
        return None


def refusal(fault: Fault) -> Answer:
    """The answer of a `429`, `500` or `500_after_apply` fault, in the vendor's own error shape."""
    status = 429 if fault.mode == "429" else 500
    headers = {"Retry-After": f"{fault.retry_after_s:g}"} if status == 429 else {}
    return Answer(status, _error_body(fault.vendor, status, fault.retry_after_s), Effect.REFUSED, None, headers)


def _error_body(vendor: str, status: int, retry_after_s: float) -> Any:
    limited = status == 429
    message = "Rate limit exceeded" if limited else "Internal server error"
    if vendor == "incidentio":
        return {
            "type": "rate_limited" if limited else "internal_error",
            "status": status,
            "request_id": str(uuid.uuid4()),
            "errors": [{"code": "rate_limited" if limited else "internal_error", "message": message}],
        }
    if vendor == "jira":
        return {"errorMessages": [message], "errors": {}}
    if vendor in ("teams", "graph"):
        return {"error": {"code": "TooManyRequests" if limited else "InternalServerError", "message": message}}
    if vendor == "discord":
        if limited:
            return {"message": "You are being rate limited.", "retry_after": retry_after_s, "global": False}
        return {"message": "500: Internal Server Error", "code": 0}
    if vendor == "openai":  # files and fine-tuning (fine_tuning.py); chat completions keep their own faults
        kind = "requests" if limited else "server_error"
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}
    if vendor == "sqs":
        kind = "RequestThrottled" if limited else "InternalError"
        return {"__type": f"com.amazonaws.sqs#{kind}", "message": message}
    return {"error": message}
