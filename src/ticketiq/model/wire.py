"""The chat-completions wire format, as pure functions over bytes: the request body of one step, the
reply read into a `ModelReply`, the reason a refusal gives.

The openai package still speaks the protocol for us (its client, headers and base URL, see
`client.py`), but the body is written and read here with orjson: its request transform walks the
whole conversation through typing introspection on every step, and its reply models are pydantic,
costs that grow with the run and bought us nothing (the conversation is already plain JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from ticketiq.errors import ModelError
from ticketiq.values.json_depth import MAX_DEPTH, too_deep


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


def request_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bytes:
    """The body `chat.completions.create(model=, messages=, tools=)` sends: compact UTF-8 JSON, its keys
    in the openai package's order, `tools` left out when there are none (OpenAI refuses an empty list)."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError as exc:  # a lone surrogate, an integer past 64 bits: nothing to send
        raise ModelError(f"model {model!r}: the conversation cannot be sent as JSON ({exc})") from None


def reply_from_body(body: bytes, model: str, model_seconds: float) -> ModelReply:
    """The reply in a 200's body; ModelError when it is no chat completion. `model` is the one asked."""
    if too_deep(body):  # I16: orjson's own limit is a refusal with no reason, json's a RecursionError
        raise ModelError(f"model {model!r} answered a body nested deeper than {MAX_DEPTH} levels")
    try:
        completion = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ModelError(f"model {model!r} answered a body that is not a chat completion") from None
    return reply_from_completion(completion, model, model_seconds)


def reply_from_completion(completion: Any, model: str, model_seconds: float) -> ModelReply:
    """Our view of a parsed chat completion, and the assistant message to append to the conversation.
    Errors name the model that answered when the body says which, else `model`, the one asked."""
    if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
        raise _not_a_completion(model)
    served = completion.get("model")
    if isinstance(served, str):
        model = served
    choices = completion["choices"]
    if not choices:
        raise ModelError(f"model {model!r} answered with no choices")
    answer = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(answer, dict):
        raise _not_a_completion(model)
    content, refusal, tool_calls = answer.get("content"), answer.get("refusal"), answer.get("tool_calls")
    if not _text_or_none(content) or not _text_or_none(refusal) or not isinstance(tool_calls, list | None):
        raise _not_a_completion(model)
    text = content if content is not None else refusal
    message: dict[str, Any] = {"role": "assistant", "content": text}
    calls: list[ToolCallRequest] = []
    wire_calls: list[dict[str, Any]] = []
    for call in tool_calls or []:
        if not isinstance(call, dict):
            raise _not_a_completion(model)
        kind = call.get("type")
        if kind != "function":
            raise ModelError(f"model {model!r} answered a {kind!r} tool call; only functions are offered")
        call_id, function = call.get("id"), call.get("function")
        if not isinstance(call_id, str) or not isinstance(function, dict):
            raise _not_a_completion(model)
        name, raw = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not isinstance(raw, str):
            raise _not_a_completion(model)
        arguments, error = parse_arguments(raw)
        calls.append(ToolCallRequest(call_id, name, arguments, error))
        wire_calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
    if wire_calls:  # OpenAI refuses an empty tool_calls list in a request
        message["tool_calls"] = wire_calls
    usage = completion.get("usage")
    return ModelReply(
        text=text,
        tool_calls=calls,
        message=message,
        prompt_tokens=_tokens(usage, "prompt_tokens"),
        completion_tokens=_tokens(usage, "completion_tokens"),
        model_seconds=model_seconds,
    )


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


def refusal_detail(status: int, body: bytes) -> str:
    """The reason a refusal gives: the `error.message` of its JSON body (or the body's own `message`),
    else the status alone, as the openai package words it."""
    if not too_deep(body):  # I16
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            value = None
        inner = value.get("error", value) if isinstance(value, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("message"), str) and inner["message"]:
            detail: str = inner["message"]
            return detail
    return f"Error code: {status}"


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _tokens(usage: Any, field: str) -> int:
    count = usage.get(field) if isinstance(usage, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) else 0


def _not_a_completion(model: str) -> ModelError:
    return ModelError(f"model {model!r} answered a body that is not a chat completion")
