"""ModelClient against the scripted stand-in over real sockets: a uvicorn server per test."""

from __future__ import annotations

import gzip
import json
import re
import socket
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import httpx
import httpx2
import openai
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from tests.support.http import TLS, PromptServer, started, stopped
from ticketiq.errors import ModelError
from ticketiq.model import ModelClient, ModelReply
from ticketiq.runtime.user_agent import user_agent
from ticketiq.settings import Settings
from ticketiq.standins.model import LATENCY_HEADER, create_router
from ticketiq.tools.vendor_pool import VendorTransport

API_KEY = "sk-test-4f1c9e0b7d2a4e6f8a1b3c5d7e9f0a2b"
PROVIDER_ID = re.compile(r"^call_[0-9A-Za-z]{24}$")


@dataclass(frozen=True)
class Sent:
    """A request as the server received it."""

    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Standin:
    root: str  # http://127.0.0.1:<port>
    sent: list[Sent]  # what /capture/v1 received, oldest first

    @property
    def base_url(self) -> str:
        return self.root + "/v1"

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {"model_base_url": self.base_url, "model_api_key": API_KEY}
        values.update(overrides)
        return Settings(**values)

    async def arrange_faults(self, mode: str, count: int, retry_after_s: float = 1.0) -> None:
        async with httpx.AsyncClient(verify=TLS) as http:
            answer = await http.post(
                self.root + "/_standin/model/faults",
                json={"mode": mode, "count": count, "retry_after_s": retry_after_s},
            )
            answer.raise_for_status()

    async def faults_remaining(self) -> int:
        async with httpx.AsyncClient(verify=TLS) as http:
            answer = await http.get(self.root + "/_standin/model/faults")
            remaining: int = answer.json()["remaining"]
            return remaining


def _completion(model: str, message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


def _app(latency_ms: int, position_ids: bool, sent: list[Sent]) -> FastAPI:
    app = FastAPI()
    app.include_router(create_router(latency_ms, position_ids))

    # An endpoint that keeps each request as it came, answers the first `refuse` of them with a 500
    # and the others with a short text.
    refuse = [0]

    @app.post("/capture/v1/chat/completions")
    async def capture(request: Request) -> JSONResponse:
        body = await request.body()
        sent.append(Sent(dict(request.headers), body))
        if refuse[0] > 0:
            refuse[0] -= 1
            return JSONResponse({"error": {"message": "try again"}}, status_code=500)
        return JSONResponse(_completion(json.loads(body)["model"], {"role": "assistant", "content": "noted"}))

    @app.post("/capture/refuse")
    async def arrange_refusals(count: int) -> None:
        refuse[0] = count

    # Endpoints that answer 200 with JSON that is no chat completion, or one that nests too deep.
    @app.post("/not-a-completion/v1/chat/completions")
    async def not_a_completion() -> JSONResponse:
        return JSONResponse({"object": "list", "data": []})

    @app.post("/deep/v1/chat/completions")
    async def deep() -> PlainTextResponse:
        nested = "[" * 5000 + "]" * 5000
        return PlainTextResponse('{"choices": ' + nested + "}", media_type="application/json")

    # An endpoint that refuses the key and echoes it back, as OpenAI's 401 does.
    @app.post("/echo-key/v1/chat/completions")
    async def echo_key(request: Request) -> JSONResponse:
        key = request.headers.get("authorization", "").removeprefix("Bearer ")
        error = {"message": f"Incorrect API key provided: {key}.", "type": "invalid_request_error"}
        return JSONResponse({"error": error}, status_code=401)

    # An endpoint that compresses its answer, as OpenAI's does when asked (Accept-Encoding: gzip).
    @app.post("/gzip/v1/chat/completions")
    async def gzipped(request: Request) -> Response:
        model = json.loads(await request.body())["model"]
        body = gzip.compress(json.dumps(_completion(model, {"role": "assistant", "content": "packed"})).encode())
        return Response(body, media_type="application/json", headers={"Content-Encoding": "gzip"})

    # An endpoint that answers 200 with a body that is not JSON, as a misconfigured proxy might.
    @app.post("/text-body/v1/chat/completions")
    async def text_body() -> PlainTextResponse:
        return PlainTextResponse("<html>gateway</html>")

    return app


@asynccontextmanager
async def standin(latency_ms: int = 0, position_ids: bool = False) -> AsyncIterator[Standin]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sent: list[Sent] = []
    config = uvicorn.Config(
        _app(latency_ms, position_ids, sent),
        log_level="warning",
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=2,
    )
    server = PromptServer(config)
    try:
        task = await started(server, sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield Standin(f"http://127.0.0.1:{port}", sent)
    finally:
        await stopped(server, task)
        sock.close()


@asynccontextmanager
async def model_client(
    settings: Settings,
    http: httpx.AsyncClient | httpx2.AsyncClient | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> AsyncIterator[ModelClient]:
    client = ModelClient(settings, http=http, transport=transport)
    try:
        yield client
    finally:
        await client.close()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "You are an operations agent."}, {"role": "user", "content": text}]


def answered(messages: list[dict[str, Any]], reply: ModelReply, results: list[Any]) -> list[dict[str, Any]]:
    """The conversation after the reply and one JSON tool result per call."""
    out = [*messages, reply.message]
    for call, result in zip(reply.tool_calls, results, strict=True):
        out.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return out


async def test_triage_round_trip_through_every_step() -> None:
    async with standin() as server, model_client(server.settings()) as client:
        messages = user("Checkout is failing, see OPS-123 please")

        first = await client.complete(model="triage", messages=messages, tools=[])
        assert first.text is None
        [read] = first.tool_calls
        assert read.name == "jira_get_issue"
        assert read.arguments == {"issue_key": "OPS-123"}
        assert read.arguments_error is None
        assert PROVIDER_ID.match(read.id)
        assert first.message == {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": read.id,
                    "type": "function",
                    "function": {"name": "jira_get_issue", "arguments": '{"issue_key": "OPS-123"}'},
                }
            ],
        }
        assert first.prompt_tokens > 0
        assert first.completion_tokens > 0
        assert first.model_seconds > 0

        messages = answered(messages, first, [{"key": "OPS-123", "fields": {"summary": "Checkout fails"}}])
        second = await client.complete(model="triage", messages=messages, tools=[])
        [create] = second.tool_calls
        assert create.name == "incidentio_create_incident"
        assert create.arguments["severity"] == "minor"
        assert create.arguments["name"].startswith("OPS-123: ")

        messages = answered(messages, second, [{"incident": {"id": "01HZINC42", "status": "triage"}}])
        third = await client.complete(model="triage", messages=messages, tools=[])
        comment, reply = third.tool_calls
        assert (comment.name, reply.name) == ("jira_add_comment", "teams_reply")
        assert comment.arguments["issue_key"] == "OPS-123"
        assert "Incident 01HZINC42 opened" in comment.arguments["body"]
        assert reply.arguments["conversation_id"] == "19:ops@thread.tacv2;messageid=1700000000000"
        assert reply.arguments["activity_id"] == "1700000000000"
        assert "01HZINC42" in reply.arguments["text"]
        assert comment.id != reply.id

        messages = answered(messages, third, [{"id": "10001"}, {"id": "1700000000001"}])
        last = await client.complete(model="triage", messages=messages, tools=[])
        assert last.tool_calls == []
        assert last.text is not None
        assert "OPS-123" in last.text
        assert "01HZINC42" in last.text
        assert last.message == {"role": "assistant", "content": last.text}


async def test_jira_key_follows_the_input() -> None:
    async with standin() as server, model_client(server.settings()) as client:
        one = await client.complete(model="triage", messages=user("look at OPS-1"), tools=[])
        two = await client.complete(model="triage", messages=user("look at SUP-77 now"), tools=[])
    assert one.tool_calls[0].arguments == {"issue_key": "OPS-1"}
    assert two.tool_calls[0].arguments == {"issue_key": "SUP-77"}


async def test_position_ids_are_only_positions() -> None:
    async with standin(position_ids=True) as server, model_client(server.settings()) as client:
        reply = await client.complete(model="writer", messages=user("deploy of OPS-9 done"), tools=[])
    assert [c.id for c in reply.tool_calls] == ["call_0", "call_1", "call_2"]
    assert [c.name for c in reply.tool_calls] == ["discord_send_message", "sqs_send_message", "webhook_post"]
    assert reply.tool_calls[1].arguments == {
        "message_body": "deploy of OPS-9 done",
        "message_group_id": "OPS-9",
    }


async def test_default_ids_are_stable_for_equal_input_and_differ_otherwise() -> None:
    async with standin() as server, model_client(server.settings()) as client:
        first = await client.complete(model="writer", messages=user("OPS-5 is down"), tools=[])
        again = await client.complete(model="writer", messages=user("OPS-5 is down"), tools=[])
        other = await client.complete(model="writer", messages=user("OPS-6 is down"), tools=[])
    ids = [c.id for c in first.tool_calls]
    assert all(PROVIDER_ID.match(i) for i in ids)
    assert len(set(ids)) == 3
    assert [c.id for c in again.tool_calls] == ids
    assert not set(ids) & {c.id for c in other.tool_calls}


async def test_429_waits_as_long_as_retry_after_says() -> None:
    async with standin() as server, model_client(server.settings(model_max_retries=2)) as client:
        await server.arrange_faults("429", count=1, retry_after_s=1)
        started = time.monotonic()
        reply = await client.complete(model="reader", messages=user("OPS-2"), tools=[])
        elapsed = time.monotonic() - started
        assert await server.faults_remaining() == 0
    assert reply.tool_calls[0].arguments == {"issue_key": "OPS-2"}
    # Retry-After: 1 was honoured: not retried at once (backoff alone would wait 0.25 s at most).
    assert elapsed >= 0.95
    assert reply.model_seconds >= 0.95


async def test_500s_are_retried_until_one_succeeds() -> None:
    async with standin() as server, model_client(server.settings(model_max_retries=3)) as client:
        await server.arrange_faults("500", count=2)
        reply = await client.complete(model="reader", messages=user("OPS-3"), tools=[])
        assert await server.faults_remaining() == 0
    assert reply.tool_calls[0].name == "jira_get_issue"


async def test_retries_exhausted_raise_model_error() -> None:
    async with standin() as server, model_client(server.settings(model_max_retries=1)) as client:
        await server.arrange_faults("500", count=5)
        with pytest.raises(ModelError, match=r"answered 500 for model 'reader' after 2 attempts: .*stand-in fault"):
            await client.complete(model="reader", messages=user("OPS-3"), tools=[])
        # One request and one retry, no more.
        assert await server.faults_remaining() == 3


async def test_a_400_is_not_retried_and_names_the_servers_reason() -> None:
    dangling = [*user("OPS-4"), {"role": "tool", "tool_call_id": "call_nope", "content": "{}"}]
    async with standin() as server, model_client(server.settings()) as client:
        with pytest.raises(ModelError) as caught:
            await client.complete(model="triage", messages=dangling, tools=[])
    text = str(caught.value)
    assert "answered 400 for model 'triage'" in text
    assert "must be a response to a preceding message with 'tool_calls'" in text
    assert "call_nope" in text
    assert API_KEY not in "".join(traceback.format_exception(caught.value))


async def test_unknown_model_is_a_404() -> None:
    async with standin() as server, model_client(server.settings()) as client:
        with pytest.raises(ModelError, match=r"answered 404 for model 'nobody': The model `nobody` does not exist"):
            await client.complete(model="nobody", messages=user("OPS-4"), tools=[])


async def test_a_key_the_server_echoes_is_not_repeated() -> None:
    async with standin() as server:
        settings = server.settings(model_base_url=server.root + "/echo-key/v1")
        async with model_client(settings) as client:
            with pytest.raises(ModelError) as caught:
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])
    assert "answered 401" in str(caught.value)
    assert "Incorrect API key provided: ***" in str(caught.value)
    assert API_KEY not in "".join(traceback.format_exception(caught.value))
    assert API_KEY not in repr(caught.value)


async def test_a_body_that_is_not_a_completion_is_a_model_error() -> None:
    async with standin() as server:
        settings = server.settings(model_base_url=server.root + "/text-body/v1")
        async with model_client(settings) as client:
            with pytest.raises(ModelError, match="answered a body that is not a chat completion"):
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])


# A conversation as the engine sends it: text that is not ASCII and holds control characters, tool calls
# and their JSON results, and tools whose schemas nest.
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an operations agent. Antworte kurz: Größe ✓ 😀"},
    {"role": "user", "content": "Checkout fails for OPS-123\n\ttab \x01 \u2028 </script>"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "jira_get_issue", "arguments": '{"k": 1}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"key": "OPS-123", "n": [1, 2.5, None]})},
]
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{n}",
            "description": "Reads an issue.",
            "parameters": {
                "type": "object",
                "properties": {
                    "issue_key": {"type": "string"},
                    "fields": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["issue_key"],
                "additionalProperties": False,
            },
        },
    }
    for n in range(3)
]


def shared_http(library: str, **kwargs: Any) -> httpx.AsyncClient | httpx2.AsyncClient:
    return httpx.AsyncClient(verify=TLS, **kwargs) if library == "httpx" else httpx2.AsyncClient(**kwargs)


@pytest.mark.parametrize("library", [None, "httpx", "httpx2", "transport"])
async def test_body_and_headers_are_what_the_openai_client_sends(library: str | None) -> None:
    # The openai package's own create, through the same client to the same endpoint, is the reference.
    # "transport": an app process's, to which each step's request is handed past the client's send.
    http = shared_http(library, headers={"X-Shared": "yes"}) if library in ("httpx", "httpx2") else None
    transport = VendorTransport(4) if library == "transport" else None
    async with standin() as server:
        settings = server.settings(model_base_url=server.root + "/capture/v1")
        async with model_client(settings, http=http, transport=transport) as client:
            for tools in (TOOLS, []):
                await client._openai.chat.completions.create(
                    model="triage", messages=cast(Any, CONVERSATION), tools=cast(Any, tools) if tools else openai.omit
                )
                reply = await client.complete(model="triage", messages=CONVERSATION, tools=tools)
                assert reply.text == "noted"
        if http is not None:
            assert not http.is_closed
            await http.aclose()
    sdk, ours, sdk_bare, ours_bare = server.sent
    assert ours.body == sdk.body
    assert ours.headers == sdk.headers
    assert ours_bare.body == sdk_bare.body
    assert ours_bare.headers == sdk_bare.headers
    assert json.loads(ours.body) == {"model": "triage", "messages": CONVERSATION, "tools": TOOLS}
    assert json.loads(ours_bare.body) == {"model": "triage", "messages": CONVERSATION}
    assert ours.headers["authorization"] == f"Bearer {API_KEY}"
    assert ours.headers["user-agent"] == user_agent()
    assert ours.headers["content-type"] == "application/json"
    assert ("x-shared" in ours.headers) == (http is not None)


@pytest.mark.parametrize("library", [None, "transport"])
async def test_a_compressed_answer_is_read_decoded(library: str | None) -> None:
    # The app's transport reads a plain 2xx without httpx's Response; a compressed one goes through it.
    transport = VendorTransport(4) if library == "transport" else None
    async with standin() as server:
        settings = server.settings(model_base_url=server.root + "/gzip/v1")
        async with model_client(settings, transport=transport) as client:
            for _ in range(2):  # the second on the request prepared by the first
                reply = await client.complete(model="triage", messages=user("OPS-1"), tools=[])
                assert reply.text == "packed"
                assert (reply.prompt_tokens, reply.completion_tokens) == (7, 3)


@pytest.mark.parametrize("direct", [False, True])
async def test_a_retry_says_which_retry_it_is_and_sends_the_same_body(direct: bool) -> None:
    async with standin() as server, httpx.AsyncClient(verify=TLS) as http:
        (await http.post(server.root + "/capture/refuse", params={"count": 2})).raise_for_status()
        settings = server.settings(model_base_url=server.root + "/capture/v1", model_max_retries=2)
        async with model_client(settings, transport=VendorTransport(4) if direct else None) as client:
            reply = await client.complete(model="triage", messages=user("OPS-1"), tools=[])
    assert reply.text == "noted"
    assert (reply.prompt_tokens, reply.completion_tokens) == (7, 3)
    assert [s.headers["x-stainless-retry-count"] for s in server.sent] == ["0", "1", "2"]
    assert len({s.body for s in server.sent}) == 1


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/not-a-completion/v1", r"^model 'triage' answered a body that is not a chat completion$"),
        ("/deep/v1", r"^model 'triage' answered a body nested deeper than 64 levels$"),
    ],
)
async def test_a_200_that_is_no_usable_completion_is_a_model_error(path: str, error: str) -> None:
    async with standin() as server:
        settings = server.settings(model_base_url=server.root + path, model_max_retries=3)
        async with model_client(settings) as client:
            with pytest.raises(ModelError, match=error) as caught:
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__ or caught.value.__context__ is None


async def test_an_unreachable_endpoint_is_retried_then_fails() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(model_base_url=f"http://127.0.0.1:{port}/v1", model_api_key=API_KEY, model_max_retries=1)
    async with model_client(settings) as client:
        with pytest.raises(ModelError, match=r"could not be reached for model 'triage' after 2 attempts"):
            await client.complete(model="triage", messages=user("OPS-4"), tools=[])


async def test_a_slow_answer_times_out() -> None:
    async with standin() as server, httpx.AsyncClient(verify=TLS, headers={LATENCY_HEADER: "1000"}) as http:
        settings = server.settings(model_timeout_s=0.2, model_max_retries=0)
        async with model_client(settings, http=http) as client:
            with pytest.raises(ModelError, match="timed out for model 'triage'"):
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_a_shared_client_of_either_library_times_out(library: str) -> None:
    async with standin() as server:
        http = shared_http(library, headers={LATENCY_HEADER: "1000"})
        settings = server.settings(model_timeout_s=0.2, model_max_retries=0)
        async with model_client(settings, http=http) as client:
            with pytest.raises(ModelError, match=r"timed out for model 'triage' \(\w*Timeout: ") as caught:
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])
        await http.aclose()
    assert isinstance(caught.value.__cause__, httpx.TimeoutException | httpx2.TimeoutException)


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
async def test_a_shared_client_of_either_library_that_cannot_connect_is_retried(library: str) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(model_base_url=f"http://127.0.0.1:{port}/v1", model_api_key=API_KEY, model_max_retries=1)
    http = shared_http(library)
    async with model_client(settings, http=http) as client:
        with pytest.raises(
            ModelError, match=r"could not be reached for model 'triage' after 2 attempts \(ConnectError"
        ):
            await client.complete(model="triage", messages=user("OPS-4"), tools=[])
    await http.aclose()


async def test_a_request_handed_to_the_transport_times_out_and_an_unreachable_one_is_retried() -> None:
    async with standin(latency_ms=1000) as server:
        settings = server.settings(model_timeout_s=0.2, model_max_retries=0)
        async with model_client(settings, transport=VendorTransport(4)) as client:
            with pytest.raises(ModelError, match=r"timed out for model 'triage' \(ReadTimeout: ") as caught:
                await client.complete(model="triage", messages=user("OPS-4"), tools=[])
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = Settings(model_base_url=f"http://127.0.0.1:{port}/v1", model_api_key=API_KEY, model_max_retries=1)
    async with model_client(settings, transport=VendorTransport(4)) as client:
        with pytest.raises(
            ModelError, match=r"could not be reached for model 'triage' after 2 attempts \(ConnectError"
        ):
            await client.complete(model="triage", messages=user("OPS-4"), tools=[])


async def test_latency_applies_to_each_request() -> None:
    async with standin(latency_ms=300) as server, model_client(server.settings()) as client:
        reply = await client.complete(model="reader", messages=user("OPS-8"), tools=[])
        assert reply.model_seconds >= 0.3
        # The header overrides the router's latency for one request.
        async with httpx.AsyncClient(verify=TLS) as http:
            started = time.monotonic()
            answer = await http.post(
                server.base_url + "/chat/completions",
                json={"model": "reader", "messages": user("OPS-8")},
                headers={LATENCY_HEADER: "700"},
            )
            assert answer.status_code == 200
            assert time.monotonic() - started >= 0.7


async def test_a_shared_httpx_client_is_used_and_left_open() -> None:
    async with standin() as server, httpx.AsyncClient(verify=TLS, headers={LATENCY_HEADER: "200"}) as http:
        async with model_client(server.settings(), http=http) as client:
            reply = await client.complete(model="reader", messages=user("OPS-10"), tools=[])
        assert reply.model_seconds >= 0.2  # the header came from the shared client
        assert not http.is_closed
        listed = await http.get(server.base_url + "/models")
    shipped = ["asker", "closer", "consultant", "delegator", "librarian", "noter", "reader", "tck", "triage", "writer"]
    assert sorted(m["id"] for m in listed.json()["data"]) == shipped


async def test_429_fault_body_and_header_look_like_openai() -> None:
    async with standin() as server, httpx.AsyncClient(verify=TLS) as http:
        await server.arrange_faults("429", count=1, retry_after_s=2)
        answer = await http.post(
            server.base_url + "/chat/completions", json={"model": "reader", "messages": user("OPS-1")}
        )
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "2"
    assert answer.json()["error"]["code"] == "rate_limit_exceeded"
