"""The CLI's side of `ticketiq.client`: the URL and token its commands (`runs`, `approvals`, `jobs`) talk with,
the client made for them, and each of the client's errors turned into one line that says what to do.

Exit codes (`cli.main`): 2 when the person must change the command or its settings before it can work
(no token; a token the API refuses, 401/403; an id it does not know, 404; a field it refuses, 422; an
argument argparse refuses), 1 when a right command did not succeed (the API cannot be reached or
answers 5xx, a conflict such as an approval decided already, 409; a watched run that did not succeed).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from ticketiq.client import ApiError, AsyncClient, BadAnswer, Client, ClientError, RetryPolicy, Unreachable
from ticketiq.errors import ConfigError, NotFound, RequestError, TicketIQError
from ticketiq.settings import Settings

MAKE_ONE = (
    "export one as TICKETIQ_TOKEN or pass --token (`ticketiq tokens create --name NAME --role operator` makes one)"
)
# A command is a person waiting at a terminal: a request refused for the moment (429, 503) or not let in
# (connection refused) is sent again twice, within a second or so, before the command says so.
CLI_RETRIES = RetryPolicy(attempts=3, base_s=0.25, cap_s=1.0, retry_after_max_s=5.0)
# `runs watch` follows again by its own rule (cli/runs.py): each of its looks is sent once, and one that
# fails says so at once, as the cut it is.
ONCE = RetryPolicy(attempts=1)


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


def refusal(error: ApiError, target: Target) -> TicketIQError:
    """The CLI's error for the API's refusal, with the API's field and message."""
    status, said = error.status, str(error)
    if status in (401, 403):
        return ConfigError(f"the API at {target.url} refused {target.token_from} ({status}): {said}")
    if status == 404:
        return NotFound("path", f"not found (404): {said}")
    if status == 422:
        return RequestError("request", f"the API refused the request (422): {said}")
    if status == 409:
        return Failed(f"the API refused it as it stands now (409): {said}")
    return Failed(f"the API at {target.url} answered {status}: {said}")


def unreachable(error: Unreachable, target: Target) -> Failed:
    cause = error.cause
    return Failed(f"cannot reach the API at {target.url} ({type(cause).__name__}: {cause or 'no answer'}); is it "
                  f"running there? The URL comes from {target.url_from}")  # fmt: skip


def failed(error: ClientError) -> bool:
    """Whether the error says a right command did not succeed (exit 1), not that the command must change."""
    return not isinstance(error, ApiError) or error.status not in (401, 403, 404, 422)


def translated(error: ClientError, target: Target) -> TicketIQError:
    if isinstance(error, ApiError):
        return refusal(error, target)
    if isinstance(error, Unreachable):
        return unreachable(error, target)
    if isinstance(error, BadAnswer):
        return Failed(f"the API at {target.url} answered {error.status} without JSON")
    return Failed(str(error))


@contextlib.contextmanager
def said(target: Target) -> Iterator[None]:
    """The client's errors inside the block, raised as the CLI's (one line, its exit code)."""
    try:
        yield
    except ClientError as exc:
        raise translated(exc, target) from exc


def _token(target: Target) -> str:
    if not target.token:
        raise ConfigError(f"TICKETIQ_TOKEN is not set and no --token was given: {MAKE_ONE}")
    return target.token


def client(target: Target, timeout_s: float = 30.0, retries: RetryPolicy = CLI_RETRIES) -> Client:
    """The client a command uses: refused before any request without a token."""
    return Client(target.url, _token(target), timeout_s=timeout_s, retries=retries)


def async_client(target: Target, timeout_s: float = 30.0) -> AsyncClient:
    return AsyncClient(target.url, _token(target), timeout_s=timeout_s, retries=CLI_RETRIES)
