"""The chat-completions client: one model step through the official `openai` package.

Any endpoint that speaks the OpenAI protocol works (OpenAI, Azure, vLLM, Ollama, LiteLLM, the stand-in).
The openai client's own retries are off: this module retries 429, 408 and 5xx answers and
connection failures itself, so the bound (`model_max_retries`), the backoff and the honouring of
`Retry-After` are ours and tested. Which waits to make is decided by pure functions; `ModelClient` is
the thin driver around them.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, cast

import httpx
import httpx2
import openai
from openai.types.chat import ChatCompletion

from ticketiq import stall
from ticketiq.errors import ModelError
from ticketiq.json_depth import MAX_DEPTH, too_deep
from ticketiq.settings import Settings
from ticketiq.user_agent import user_agent

# Backoff without Retry-After: 0.25 s, 0.5 s, 1 s ... at most 8 s, each scaled by a random 50-100%
# so that clients refused together do not all come back together.
_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
# A server asking for a longer pause than this is not waited out inside one step: the step fails with
# the reason, rather than holding the run silently for minutes.
RETRY_AFTER_MAX_S = 60.0


@dataclass(frozen=True)
class ToolCallRequest:
    id: str  # provider tool-call id
    name: str
    arguments: dict[str, Any]
    arguments_error: str | None = None  # set when the model sent arguments that are not a JSON object


@dataclass(frozen=True)
class ModelReply:
    text: str | None
    tool_calls: list[ToolCallRequest]
    # The assistant message exactly as it goes back into the conversation: role, content, and
    # tool_calls with the arguments as the JSON string the model sent.
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    # Wall time from the first request sent to the last answer received, backoff waits included:
    # all of it is time spent on the model, not engine overhead.
    model_seconds: float


def is_retryable_status(status: int) -> bool:
    """A 429, a 408 or a 5xx may succeed if asked again; any other refusal will not."""
    return status in (408, 429) or status >= 500


def parse_retry_after(headers: dict[str, str], now: datetime) -> float | None:
    """Seconds the server asked us to wait, from `retry-after-ms` (OpenAI's) or `Retry-After`
    (seconds or an HTTP date); None when it asked nothing readable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT by definition
            when = when.replace(tzinfo=UTC)
        return max((when - now).total_seconds(), 0.0)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def backoff_s(retries_taken: int, retry_after_s: float | None, jitter: float) -> float | None:
    """How long to wait before retry number `retries_taken + 1`; None when the server asked for a
    longer pause than a step waits out. `jitter` is a number in [0, 1)."""
    if retry_after_s is not None:
        if retry_after_s > RETRY_AFTER_MAX_S:
            return None
        # Never earlier than asked; up to 10% later so a crowd told the same time spreads out.
        return retry_after_s * (1.0 + 0.1 * jitter)
    ceiling = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2.0**retries_taken)
    return ceiling * (0.5 + 0.5 * jitter)


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """The call's arguments as a dict, or `({}, why)` when the model sent something else."""
    if raw.strip() == "":
        return {}, None  # some servers (vLLM, Ollama) send "" for a call without arguments
    if too_deep(raw):  # I16: a RecursionError wherever it were read
        return {}, f"arguments are JSON nested deeper than {MAX_DEPTH} levels"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
    if not isinstance(value, dict):
        return {}, f"arguments are JSON {type(value).__name__}, not an object"
    return value, None


def reply_from_completion(completion: ChatCompletion, model_seconds: float) -> ModelReply:
    """Our view of the provider's answer, and the assistant message to append to the conversation."""
    if not completion.choices:
        raise ModelError(f"model {completion.model!r} answered with no choices")
    answer = completion.choices[0].message
    text = answer.content if answer.content is not None else answer.refusal
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls: list[ToolCallRequest] = []
    wire_calls: list[dict[str, Any]] = []
    for call in answer.tool_calls or []:
        if call.type != "function":
            raise ModelError(
                f"model {completion.model!r} answered a {call.type!r} tool call; only functions are offered"
            )
        arguments, error = parse_arguments(call.function.arguments)
        calls.append(ToolCallRequest(call.id, call.function.name, arguments, error))
        wire_calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        )
    if wire_calls:  # OpenAI refuses an empty tool_calls list in a request
        message["tool_calls"] = wire_calls
    usage = completion.usage
    return ModelReply(
        text=text,
        tool_calls=calls,
        message=message,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        model_seconds=model_seconds,
    )


class ModelClient:
    """One per process; `complete` is safe to call from many runs at once.

    Pass `http` to share a connection pool (an `httpx.AsyncClient` or the `httpx2.AsyncClient` the
    openai package uses itself); its owner closes it. Without one, the openai client's own is used
    and `close()` closes it.
    """

    def __init__(self, settings: Settings, *, http: httpx.AsyncClient | httpx2.AsyncClient | None = None) -> None:
        self._settings = settings
        self._owns_http = http is None
        self._openai = openai.AsyncOpenAI(
            api_key=settings.model_api_key,
            base_url=settings.model_base_url,
            timeout=settings.model_timeout_s,
            max_retries=0,
            default_headers={"User-Agent": user_agent()},
            # The openai package accepts the legacy httpx client at run time; its annotation names
            # only httpx2.
            http_client=cast(httpx2.AsyncClient | None, http),
        )

    async def close(self) -> None:
        if self._owns_http:
            await self._openai.close()

    async def complete(self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Ask for one step. Raises ModelError when the endpoint refuses, or keeps failing after
        `model_max_retries` retries."""
        started = time.perf_counter()
        retries_taken = 0
        while True:
            cause: BaseException | None = None
            stall.check()  # a process stalled past its leases asks nothing more
            try:
                completion = await self._openai.chat.completions.create(
                    model=model,
                    messages=cast(Any, messages),
                    tools=cast(Any, tools) if tools else openai.omit,
                )
            except openai.APIStatusError as exc:
                if not is_retryable_status(exc.status_code):
                    # from None: the openai error's text is the raw body, which may echo the key.
                    raise ModelError(self._refusal(model, exc, retries_taken)) from None
                headers = {k.lower(): v for k, v in exc.response.headers.items()}
                retry_after = parse_retry_after(headers, datetime.now(UTC))
                reason = self._refusal(model, exc, retries_taken)
            except openai.APIConnectionError as exc:
                retry_after = None
                reason = self._unreachable(model, exc, retries_taken)
                cause = exc.__cause__
            except openai.OpenAIError as exc:
                raise ModelError(
                    self._scrub(f"model {model!r}: the openai client could not use the answer: {exc}")
                ) from None
            else:
                if not isinstance(completion, ChatCompletion):  # a 200 whose body is not JSON
                    raise ModelError(f"model {model!r} answered a body that is not a chat completion")
                return reply_from_completion(completion, time.perf_counter() - started)
            if retries_taken >= self._settings.model_max_retries:
                raise ModelError(reason) from cause
            wait = backoff_s(retries_taken, retry_after, random.random())
            if wait is None:
                raise ModelError(
                    f"{reason}; it asked to wait {retry_after:.0f} s, longer than the "
                    f"{RETRY_AFTER_MAX_S:.0f} s a step waits"
                )
            await asyncio.sleep(wait)
            retries_taken += 1

    def _refusal(self, model: str, exc: openai.APIStatusError, retries_taken: int) -> str:
        detail = exc.message
        body = exc.body
        # The openai package hands over the body's "error" object; some servers send the whole body.
        if isinstance(body, dict):
            inner = body.get("error", body)
            if isinstance(inner, dict) and isinstance(inner.get("message"), str):
                detail = inner["message"]
        return self._scrub(
            f"model endpoint answered {exc.status_code} for model {model!r}{_after(retries_taken)}: {detail}"
        )

    def _unreachable(self, model: str, exc: openai.APIConnectionError, retries_taken: int) -> str:
        what = "timed out" if isinstance(exc, openai.APITimeoutError) else "could not be reached"
        cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
        return self._scrub(
            f"model endpoint {self._settings.model_base_url} {what} for model {model!r}{_after(retries_taken)}{cause}"
        )

    def _scrub(self, text: str) -> str:
        # Servers echo a rejected key back ("Incorrect API key provided: sk-..."); it never goes on.
        for secret in self._settings.secrets():
            text = text.replace(secret, "***")
        return text


def _after(retries_taken: int) -> str:
    return f" after {retries_taken + 1} attempts" if retries_taken else ""
