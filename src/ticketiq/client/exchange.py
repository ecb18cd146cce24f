"""A request and its answer as plain values, and the conversation that sends one: the one core both shells
drive (`sync.Client`, `aio.AsyncClient`), as psycopg's generators drive a connection either way.

A conversation is a generator. It yields a `Request` (the shell sends it and sends back its `Answer`, or a
`NoAnswer`) or a `Pause` (the shell sleeps, and sends back None), and returns its result. What to send, what
to send again, how long to wait and what an answer means are decided here, with no I/O: the shells only send
and sleep.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from ticketiq.client.errors import ClientError, Unreachable, refusal
from ticketiq.client.retries import Lost, RetryPolicy, delay_s, retry_after_s

T = TypeVar("T")

IDEMPOTENCY_KEY = "Idempotency-Key"


@dataclass(frozen=True)
class Request:
    """One request. `key`: its Idempotency-Key, the same on every try. `safe`: a repeat changes nothing
    (a read; a POST whose repeat is harmless); a keyed request is safe by its key. `read_s`: how long its
    answer may take, when longer than the client's timeout (a wait)."""

    method: str
    path: str
    params: tuple[tuple[str, str], ...] = ()
    body: Any = None
    key: str | None = None
    safe: bool = False
    read_s: float | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {IDEMPOTENCY_KEY: self.key} if self.key else {}

    @property
    def repeatable(self) -> bool:
        return self.safe or self.key is not None


@dataclass(frozen=True)
class Answer:
    """What came back: `headers` with lower-case names; `at` when it came, by the shell's wall clock (for a
    `Retry-After` given as a date)."""

    status: int
    body: bytes
    reason: str
    at: datetime
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            raise BadAnswer(self.status) from None

    @property
    def retry_after_s(self) -> float | None:
        return retry_after_s(self.headers.get("retry-after"), self.at)


@dataclass(frozen=True)
class NoAnswer:
    """The request got no answer: `lost` says whether it left; `url` where it went."""

    lost: Lost
    error: Exception
    url: str


@dataclass(frozen=True)
class Pause:
    seconds: float


class BadAnswer(ClientError):
    """A success whose body is not what the API answers (not JSON): a proxy in the way, or no TicketIQ."""

    def __init__(self, status: int) -> None:
        super().__init__(f"the API answered {status} without JSON")
        self.status = status


Conversation = Generator[Request | Pause, Answer | NoAnswer | None, T]


def sent(request: Request, policy: RetryPolicy, jitter: Callable[[], float] = random.random) -> Conversation[Answer]:
    """The request's successful answer (any status below 400), sent again as `retries.py` decides; else the
    refusal raised (`errors.refusal`) or `Unreachable`."""
    tries = 0
    while True:
        tries += 1
        got = yield request
        if isinstance(got, Answer):
            if got.status < 400:
                return got
            asked = got.retry_after_s
            pause = delay_s(policy, tries, status=got.status, safe=request.repeatable, keyed=request.key is not None,
                            asked_s=asked, jitter=jitter())  # fmt: skip
            if pause is None:
                raise refusal(got.status, got.body, got.reason, asked)
        elif isinstance(got, NoAnswer):
            pause = delay_s(policy, tries, lost=got.lost, safe=request.repeatable, jitter=jitter())
            if pause is None:
                raise Unreachable(got.url, got.error) from got.error
        else:
            raise TypeError(f"a request was answered with {got!r}")
        yield Pause(pause)


def answered(request: Request, policy: RetryPolicy) -> Conversation[Any]:
    """The JSON body of the request's successful answer."""
    answer = yield from sent(request, policy)
    return answer.json()
