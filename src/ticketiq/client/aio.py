"""`AsyncClient`: the API from asyncio code, on httpx. The twin of `sync.Client`, method for method: the same
conversations (`operations.py`), driven with `await` and `asyncio.sleep`.

    async with AsyncClient("http://127.0.0.1:8080", token) as api:
        run = await api.create("triage", "OPS-1 is down", wait=120)
        print(run["status"], run["answer"])
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

import httpx
from httpx_sse import EventSource, aconnect_sse

from ticketiq.client import models, operations
from ticketiq.client.errors import ServerError, TooMany, Unreachable, refusal
from ticketiq.client.events import RunEvent, Told, follow_again_s
from ticketiq.client.exchange import Answer, Conversation, NoAnswer, Pause, Request, answered
from ticketiq.client.operations import fresh_key
from ticketiq.client.retries import Lost, RetryPolicy, retry_after_s
from ticketiq.client.wire import NOT_SENT, client_headers, events_path, request_timeout, stream_timeout

T = TypeVar("T")


class AsyncClient:
    """One connection pool to the API at `url`, with the bearer `token` on every request. `timeout_s`: of a
    request (a wait's is longer by its wait); `retries`: how often and how long apart a request is sent
    again (`retries.py`); `verify`: httpx's TLS verification."""

    def __init__(
        self, url: str, token: str, *, timeout_s: float = 30.0, retries: RetryPolicy | None = None,
        verify: Any = True,
    ) -> None:  # fmt: skip
        self.url = url.rstrip("/")
        self.retries = retries or RetryPolicy()
        self.timeout_s = timeout_s
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=client_headers(token), timeout=timeout_s, verify=verify
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    # ----- runs ---------------------------------------------------------------------------------------

    @overload
    async def create(self, agent: str, input: str, *, may_wait: bool | None = None, wait: None = None,
               idempotency_key: str | None = None) -> models.RunCreated: ...  # fmt: skip
    @overload
    async def create(self, agent: str, input: str, *, may_wait: bool | None = None, wait: float,
               idempotency_key: str | None = None) -> models.RunShown: ...  # fmt: skip
    async def create(
        self, agent: str, input: str, *, may_wait: bool | None = None, wait: float | None = None,
        idempotency_key: str | None = None,
    ) -> models.RunCreated | models.RunShown:  # fmt: skip
        """A new run of `agent` on `input`. Its Idempotency-Key (yours, or one made here) is the same on every
        retry: a retry never makes a second run. With `wait` (seconds): the run once it ended or waits for a
        person, or as it is when `wait` passed (`POST /v1/runs?wait=S`, then `wait` as needed)."""
        key = idempotency_key or fresh_key("run")
        if wait is None:
            return await self._drive(operations.made(agent, input, may_wait, key, self.retries))
        return await self._drive(operations.created(agent, input, may_wait, wait, key, self.retries))

    async def run(self, run_id: str) -> models.RunShown:
        """The run as it is now."""
        shown: models.RunShown = await self._drive(answered(operations.run_request(run_id), self.retries))
        return shown

    async def wait(self, run_id: str, timeout_s: float = 60.0) -> models.RunShown:
        """The run once it ended or waits for a person, or as it is when `timeout_s` passed."""
        return await self._drive(operations.waited(run_id, timeout_s, self.retries))

    async def runs_page(self, cursor: str | None = None, **query: Any) -> models.RunPage:
        """One page of runs, newest first; `query`: status (one or a list), agent, channel, created_by, since,
        until, q, held, limit (`GET /v1/runs`)."""
        page: models.RunPage = await self._drive(answered(operations.runs_request(query, cursor), self.retries))
        return page

    async def runs(self, **query: Any) -> AsyncIterator[models.RunListed]:
        """Every run the query matches, newest first, page after page (the keyset cursor of each)."""
        cursor: str | None = None
        while True:
            page = await self.runs_page(cursor, **query)
            for run in page["runs"]:
                yield run
            cursor = page["next_cursor"]
            if not cursor:
                return

    async def timeline(self, run_id: str) -> models.Timeline:
        """The run, its attempts and steps, each call with its outcome and how a takeover settled it."""
        found: models.Timeline = await self._drive(answered(operations.timeline_request(run_id), self.retries))
        return found

    async def transcript(self, run_id: str, after: int = 0, limit: int = 500) -> dict[str, Any]:
        found: dict[str, Any] = await self._drive(answered(operations.transcript_request(run_id, after, limit),
                                                     self.retries))  # fmt: skip
        return found

    async def give_input(
        self, run_id: str, text: str, question_id: str | None = None, *, idempotency_key: str | None = None
    ) -> models.InputTaken:
        """The input a waiting run asked for: for `question_id`, else for its oldest pending question."""
        request = operations.input_request(run_id, text, question_id, idempotency_key or fresh_key("input"))
        taken: models.InputTaken = await self._drive(answered(request, self.retries))
        return taken

    async def stop(self, run_id: str) -> models.StopRequested:
        stopped: models.StopRequested = await self._drive(answered(operations.stop_request(run_id), self.retries))
        return stopped

    async def resume(self, run_id: str, reason: str | None = None) -> models.Resumed:
        """I24: a restored run waiting for an operator goes on; the writes it held are sent."""
        resumed: models.Resumed = await self._drive(answered(operations.resume_request(run_id, reason), self.retries))
        return resumed

    # ----- approvals and jobs -------------------------------------------------------------------------

    async def approvals(self, status: str | None = "pending", limit: int = 100) -> list[models.ApprovalShown]:
        found: models.Approvals = await self._drive(answered(operations.approvals_request(status, limit), self.retries))
        return found["approvals"]

    async def decide(
        self, approval_id: str, approve: bool, reason: str | None = None, *, idempotency_key: str | None = None
    ) -> models.ApprovalShown:
        """Approve or reject one held call; the waiting run goes on."""
        request = operations.decide_request(approval_id, approve, reason, idempotency_key or fresh_key("decide"))
        decided: models.ApprovalShown = await self._drive(answered(request, self.retries))
        return decided

    async def job(self, job_id: str) -> models.JobShown:
        found: models.JobShown = await self._drive(answered(operations.job_request(job_id), self.retries))
        return found

    async def jobs(self, status: str | None = None, kind: str | None = None, limit: int = 100) -> list[models.JobShown]:
        found: dict[str, list[models.JobShown]] = await self._drive(
            answered(operations.jobs_request(status, kind, limit), self.retries)
        )
        return found["jobs"]

    # ----- events -------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def events(self, run_id: str, last_event_id: str | None = None) -> AsyncIterator[AsyncEventStream]:
        """One stream of the run's events, from after `last_event_id`; a refusal raises as any request's."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        timeout = stream_timeout(self.timeout_s)
        try:
            async with aconnect_sse(self.http, "GET", events_path(run_id), headers=headers, timeout=timeout) as source:
                response = source.response
                if not response.is_success:
                    await response.aread()
                    asked = retry_after_s(response.headers.get("retry-after"), datetime.now(UTC))
                    raise refusal(response.status_code, response.content, response.reason_phrase, asked)
                told = Told(last_id=last_event_id, all_told=response.status_code == 204)
                yield AsyncEventStream(None if told.all_told else source, told)
        except httpx.TransportError as exc:
            raise Unreachable(self.url, exc) from exc

    async def follow(self, run_id: str, last_event_id: str | None = None) -> AsyncIterator[RunEvent]:
        """The run's events until its `end`, streams that close or are cut followed again (`events.py`)."""
        failures = 0
        while True:
            error: Exception | None = None
            told = Told(last_id=last_event_id, cut=True)
            try:
                async with self.events(run_id, last_event_id) as stream:
                    told = stream.told
                    async for event in stream:
                        failures = 0
                        yield event
            except (Unreachable, TooMany, ServerError) as exc:
                error = exc
            last_event_id = told.last_id or last_event_id
            failures = failures + 1 if told.cut else 0
            pause = follow_again_s(told, failures, self.retries, random.random())
            if pause is None:
                if told.ended or told.all_told:
                    return
                raise error or Unreachable(self.url, ConnectionError(f"the events were cut {failures} times"))
            await asyncio.sleep(pause)

    # ----- the shell ----------------------------------------------------------------------------------

    async def _drive(self, conversation: Conversation[T]) -> T:
        reply: Answer | NoAnswer | None = None
        while True:
            try:
                wanted = conversation.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            if isinstance(wanted, Pause):
                await asyncio.sleep(wanted.seconds)
                reply = None
            else:
                reply = await self._exchange(wanted)

    async def _exchange(self, request: Request) -> Answer | NoAnswer:
        try:
            response = await self.http.request(
                request.method,
                request.path,
                params=request.params,
                json=request.body,
                headers=request.headers,
                timeout=request_timeout(self.timeout_s, request),
            )
        except NOT_SENT as exc:
            return NoAnswer(Lost.NOT_SENT, exc, self.url)
        except httpx.TransportError as exc:
            return NoAnswer(Lost.CUT, exc, self.url)
        return Answer(response.status_code, response.content, response.reason_phrase, datetime.now(UTC),
                      response.headers)  # fmt: skip


class AsyncEventStream:
    """The events of one stream; once it ends, `told` says how (`events.Told`)."""

    def __init__(self, source: EventSource | None, told: Told) -> None:
        self.source = source
        self.told = told

    async def __aiter__(self) -> AsyncIterator[RunEvent]:
        if self.source is None:
            return
        try:
            async for sse in self.source.aiter_sse():
                event = self.told.heard(sse)
                if event is not None:
                    yield event
        except httpx.TransportError:
            self.told.cut = True
