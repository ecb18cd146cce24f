"""The HTTP client of the CLI's commands over the API (`runs`, `approvals`): the URL and token they talk
with, each refusal turned into one line that says what to do, and the run events as Server-Sent Events.

Exit codes (`cli.main`): 2 when the person must change the command or its settings before it can work
(no token; a token the API refuses, 401/403; an id it does not know, 404; a field it refuses, 422; an
argument argparse refuses), 1 when a right command did not succeed (the API cannot be reached or
answers 5xx, a conflict such as an approval decided already, 409; a watched run that did not succeed).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, connect_sse

from ticketiq.errors import ConfigError, NotFound, RequestError, TicketIQError
from ticketiq.settings import Settings

MAKE_ONE = (
    "export one as TICKETIQ_TOKEN or pass --token (`ticketiq tokens create --name NAME --role operator` makes one)"
)
# The events stream is quiet between changes; sse-starlette pings every 15 s, so a read that waits
# longer than this lost its process (or the edge): follow again.
EVENTS_READ_S = 45.0


class Failed(TicketIQError):
    """The command was right and did not succeed: exit code 1."""


@dataclass(frozen=True)
class Target:
    """The API and token a command talks with, and where each came from (for the messages)."""

    url: str
    token: str | None
    url_from: str
    token_from: str

    @classmethod
    def of(cls, url: str | None, token: str | None, settings: Settings) -> Target:
        """`--url` and `--token` win; TICKETIQ_URL and TICKETIQ_TOKEN are the defaults."""
        return cls(
            url=(url or settings.url).rstrip("/"),
            token=token or settings.token,
            url_from="--url" if url else "TICKETIQ_URL",
            token_from="--token" if token else "TICKETIQ_TOKEN",
        )


def console_link(url: str, run_id: str) -> str:
    """Where a person looks at a run: every run id the CLI prints comes with it."""
    return f"{url.rstrip('/')}/console/runs/{run_id}"


def checked_id(value: str, field: str, noun: str, made_by: str) -> str:
    """A run or approval id is a UUID: a malformed one is refused before any request is sent."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise RequestError(field, f"{value!r} is not {noun} (a UUID, as {made_by} answers it)") from None


def detail(response: httpx.Response) -> str:
    """The API's refusal as `field: message` (its `{"detail": [{"loc", "msg"}]}`), else its text."""
    try:
        found = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
    if isinstance(found, list) and found and isinstance(found[0], dict):
        first = found[0]
        loc = ".".join(str(part) for part in first.get("loc", ()))
        message = str(first.get("msg", found))
        return f"{loc}: {message}" if loc else message
    return str(found)


def refusal(response: httpx.Response, target: Target) -> TicketIQError:
    """The error of a response that is not a success, with the API's field and message."""
    status, said = response.status_code, detail(response)
    if status in (401, 403):
        return ConfigError(f"the API at {target.url} refused {target.token_from} ({status}): {said}")
    if status == 404:
        return NotFound("path", f"not found (404): {said}")
    if status == 422:
        return RequestError("request", f"the API refused the request (422): {said}")
    if status == 409:
        return Failed(f"the API refused it as it stands now (409): {said}")
    return Failed(f"the API at {target.url} answered {status}: {said}")


def unreachable(exc: httpx.HTTPError, target: Target) -> Failed:
    return Failed(f"cannot reach the API at {target.url} ({type(exc).__name__}: {exc or 'no answer'}); is it "
                  f"running there? The URL comes from {target.url_from}")  # fmt: skip


class Api:
    """One connection pool to the API, with the bearer token on every request."""

    def __init__(self, target: Target, timeout_s: float = 30.0) -> None:
        if not target.token:
            raise ConfigError(f"TICKETIQ_TOKEN is not set and no --token was given: {MAKE_ONE}")
        self.target = target
        self.client = httpx.Client(
            base_url=target.url, headers={"Authorization": f"Bearer {target.token}"}, timeout=timeout_s
        )

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]] | None = None) -> Any:
        return self._answer(lambda: self.client.get(path, params=params))

    def post(self, path: str, body: dict[str, Any], *, key: str | None = None) -> Any:
        """A POST; `key`: its Idempotency-Key (the same request sent again makes nothing twice)."""
        headers = {"Idempotency-Key": key} if key else None
        return self._answer(lambda: self.client.post(path, json=body, headers=headers))

    def _answer(self, send: Any) -> Any:
        try:
            response: httpx.Response = send()
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.target) from exc
        if not response.is_success:
            raise refusal(response, self.target)
        try:
            return response.json()
        except ValueError as exc:
            raise Failed(f"the API at {self.target.url} answered {response.status_code} without JSON") from exc

    @contextlib.contextmanager
    def events(self, path: str, last_id: str | None = None) -> Iterator[Events]:
        """A Server-Sent Events stream, followed on from `last_id` (the id of the last event a stream of it
        sent: nothing told before is told again). A refusal raises as `get` does."""
        timeout = httpx.Timeout(10.0, read=EVENTS_READ_S)
        headers = {"Last-Event-ID": last_id} if last_id else {}
        try:
            with connect_sse(self.client, "GET", path, timeout=timeout, headers=headers) as source:
                if not source.response.is_success:
                    source.response.read()
                    raise refusal(source.response, self.target)
                yield Events(source if source.response.status_code != 204 else None)
        except httpx.HTTPError as exc:
            raise unreachable(exc, self.target) from exc


class Events:
    """The (event, data) pairs of one stream, and after them how it ended: `cut` (the process died, the
    read waited too long) or closed by the server (the run ended, or the stream's time was up: then it is
    followed on from `last_id`, after `retry_s`). 204: nothing more to tell."""

    def __init__(self, source: EventSource | None) -> None:
        self.source = source
        self.told_all = source is None  # 204: the run ended and the follower was told so
        self.cut = False
        self.last_id: str | None = None
        self.retry_s = 1.0

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        if self.source is None:
            return
        try:
            for sse in self.source.iter_sse():
                self.last_id = sse.id or self.last_id
                if sse.retry is not None:
                    self.retry_s = sse.retry / 1000
                if not sse.event and not sse.data:
                    continue
                try:
                    data = json.loads(sse.data) if sse.data else {}
                except ValueError:
                    data = {"text": sse.data}
                yield sse.event or "message", data if isinstance(data, dict) else {"value": data}
        except httpx.HTTPError:
            self.cut = True  # cut mid-stream: the caller reads the run and follows again
