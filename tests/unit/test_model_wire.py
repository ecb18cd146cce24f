"""The chat-completions wire format: the body written, the reply read, the refusal's reason. No server;
tests/integration/test_model_client.py compares the body and headers with the openai client's own."""

from __future__ import annotations

import functools
import json
from typing import Any

import httpx2
import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.errors import ModelError
from ticketiq.model.wire import refusal_detail, reply_from_body, request_body


def body(**fields: Any) -> bytes:
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "gpt-served"}
    completion.update(fields)
    return orjson.dumps(completion)


def message(**fields: Any) -> bytes:
    return body(choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **fields}}])


def call(**fields: Any) -> dict[str, Any]:
    return {"id": "call_a", "type": "function", "function": {"name": "t", "arguments": "{}"}, **fields}


# JSON the engine could hold: no floats (json writes 1e-07 where orjson writes 1e-7, the same number),
# no lone surrogates (neither writes them), integers within 64 bits.
_TEXT = st.text(alphabet=st.characters(codec="utf-8"))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=20,
)


_WRITTEN: list[bytes] = []


def _keep(request: httpx2.Request) -> httpx2.Response:
    _WRITTEN.append(request.read())
    return httpx2.Response(200, json={})


@functools.cache
def _openai_client() -> openai.OpenAI:
    """An openai client whose requests go nowhere: its transport keeps each body it is given."""
    http = httpx2.Client(transport=httpx2.MockTransport(_keep))
    return openai.OpenAI(api_key="sk-unit", base_url="http://model.invalid/v1", max_retries=0, http_client=http)


def openai_writes(body: dict[str, Any]) -> bytes:
    """The bytes the openai client writes for this JSON body (its public `post`, which serializes the body
    as `chat.completions.create` does once its arguments are plain JSON)."""
    _openai_client().post("/chat/completions", body=body, cast_to=httpx2.Response)
    return _WRITTEN.pop()


@given(st.lists(st.dictionaries(_TEXT, _JSON, max_size=4), min_size=1, max_size=4), st.lists(_JSON, max_size=3))
def test_the_body_is_the_bytes_the_openai_client_writes(messages: list[dict[str, Any]], tools: list[Any]) -> None:
    sent: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        sent["tools"] = tools
    written = request_body("m", messages, tools)
    assert written == openai_writes(sent)
    assert json.loads(written) == sent


def test_no_tools_are_left_out_and_keys_keep_their_order() -> None:
    assert request_body("m", [{"role": "user", "content": "é"}], []) == (
        '{"model":"m","messages":[{"role":"user","content":"é"}]}'.encode()
    )
    assert list(json.loads(request_body("m", [], [{"type": "function"}]))) == ["model", "messages", "tools"]


def test_a_conversation_that_is_no_json_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ModelError, match=r"^model 'm': the conversation cannot be sent as JSON \(.*surrogates"):
        request_body("m", [{"role": "user", "content": "\ud800"}], [])


def test_a_text_reply() -> None:
    reply = reply_from_body(
        message(content="done", refusal=None)[:-1] + b',"usage":{"prompt_tokens":12,"completion_tokens":4}}', "m", 0.5
    )
    assert (reply.text, reply.tool_calls, reply.message) == ("done", [], {"role": "assistant", "content": "done"})
    assert (reply.prompt_tokens, reply.completion_tokens, reply.model_seconds) == (12, 4, 0.5)


def test_a_refusal_is_the_text() -> None:
    reply = reply_from_body(message(content=None, refusal="I can't help with that."), "m", 0.0)
    assert reply.text == "I can't help with that."
    assert reply.message == {"role": "assistant", "content": "I can't help with that."}


def test_tool_calls_keep_their_arguments_and_say_what_is_wrong_with_them() -> None:
    deep = "[" * 65 + "]" * 65
    calls = [
        call(id="call_1", function={"name": "a", "arguments": '{"k": "OPS-1"}'}),
        call(id="call_2", function={"name": "b", "arguments": ""}),
        call(id="call_3", function={"name": "c", "arguments": deep}),
    ]
    reply = reply_from_body(message(content=None, tool_calls=calls), "m", 0.0)
    assert [(c.id, c.name, c.arguments, c.arguments_error) for c in reply.tool_calls] == [
        ("call_1", "a", {"k": "OPS-1"}, None),
        ("call_2", "b", {}, None),
        ("call_3", "c", {}, "arguments are JSON nested deeper than 64 levels"),
    ]
    assert reply.message["tool_calls"] == calls
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)  # no usage sent


def test_no_choices_and_a_call_that_is_no_function_name_the_model_that_answered() -> None:
    with pytest.raises(ModelError, match=r"^model 'gpt-served' answered with no choices$"):
        reply_from_body(body(choices=[]), "m", 0.0)
    with pytest.raises(ModelError, match=r"^model 'gpt-served' answered a 'custom' tool call; only functions"):
        reply_from_body(message(content=None, tool_calls=[call(type="custom")]), "m", 0.0)


@pytest.mark.parametrize(
    "answer",
    [
        b"<html>gateway</html>",
        b"",
        b"[]",
        b'"text"',
        b"{}",
        body(choices={"0": {}}),
        body(choices=[None]),
        body(choices=[{"message": "hi"}]),
        message(content=7),
        message(content=None, refusal=["no"]),
        message(content=None, tool_calls={"id": "x"}),
        message(content=None, tool_calls=["call"]),
        message(content=None, tool_calls=[call(id=None)]),
        message(content=None, tool_calls=[call(function="t({})")]),
        message(content=None, tool_calls=[call(function={"name": "t", "arguments": {"k": 1}})]),
        message(content=None, tool_calls=[call(function={"arguments": "{}"})]),
    ],
)
def test_a_body_that_is_no_chat_completion(answer: bytes) -> None:
    with pytest.raises(ModelError, match=r"answered a body that is not a chat completion$"):
        reply_from_body(answer, "m", 0.0)


def test_a_body_nested_too_deep_is_refused_before_it_is_parsed() -> None:
    # Deeper than orjson's own limit (1024) and Python's recursion limit: the reason is ours.
    for depth in (65, 2_000, 200_000):
        with pytest.raises(ModelError, match=r"^model 'm' answered a body nested deeper than 64 levels$"):
            reply_from_body(b'{"choices": [], "x": ' + b"[" * depth + b"]" * depth + b"}", "m", 0.0)
    shallow = body(choices=[], x=orjson.loads("[" * 63 + "]" * 63))  # 64 levels, the body its first
    with pytest.raises(ModelError, match="no choices"):
        reply_from_body(shallow, "m", 0.0)


def test_usage_that_is_no_count_counts_nothing() -> None:
    answer = message(content="ok")[:-1] + b',"usage":{"prompt_tokens":true,"completion_tokens":"4"}}'
    reply = reply_from_body(answer, "m", 0.0)
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)


def test_a_refusal_gives_the_servers_reason_or_its_status() -> None:
    assert refusal_detail(400, b'{"error": {"message": "bad tool", "type": "x"}}') == "bad tool"
    assert refusal_detail(401, b'{"message": "no key"}') == "no key"
    assert refusal_detail(502, b"<html>bad gateway</html>") == "Error code: 502"
    assert refusal_detail(500, b'{"error": {"message": ""}}') == "Error code: 500"
    assert refusal_detail(500, b'{"error": "plain"}') == "Error code: 500"
    assert refusal_detail(500, b'{"error": {"message": "x", "d": ' + b"[" * 5000 + b"]" * 5000 + b"}}") == (
        "Error code: 500"
    )
