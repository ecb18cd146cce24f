"""Traces over OTLP (issue 36, runtime/tracing.py, runtime/run_spans.py), sent to a real OTLP/HTTP receiver
(tests/support/otlp_receiver.py) that decodes the protobuf: a run's spans, their ids and attributes, the
trace continued from the request that started the run, and `traceparent` on the calls the run sends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.engine import Harness, engine_under_test
from tests.support.http import TLS, serving
from tests.support.otlp_receiver import Receiver, receiving_grpc
from ticketiq.entries.api import create_app
from ticketiq.runtime import tracing

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {"a": [READ, READ, {"text": "answered {jira_key}"}]}
AGENTS: dict[str, dict[str, Any]] = {"a": {"tools": ["probe_read"]}}
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.fixture
def receiver() -> Receiver:
    return Receiver()


@asynccontextmanager
async def traced_site(
    db_url: str, tmp: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    async with serving(receiver.app()) as collector:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        try:
            async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS) as h:
                assert tracing.ON
                token = await h.token("ops", "operator")
                app = create_app(h.settings, h.process)
                async with (
                    serving(app) as base,
                    httpx.AsyncClient(
                        verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
                    ) as client,
                ):
                    yield client, h
        finally:
            await asyncio.to_thread(tracing.stop)  # tracing is the interpreter's: off for the next test


async def ended(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await client.get(f"/v1/runs/{run_id}", params={"wait": 30})).json()
    return found


async def test_a_runs_spans_continue_its_callers_trace_with_the_genai_names_and_the_run_on_each(
    db_url: str, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with traced_site(db_url, tmp_path, receiver, monkeypatch) as (client, h):
        made = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-1"},
                                 headers={"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})  # fmt: skip
        run_id = made.json()["id"]
        assert (await ended(client, run_id))["status"] == "succeeded"
        assert await asyncio.to_thread(tracing.flush, 10.0)
        spans = receiver.of_run(run_id)
        names = sorted(s["name"] for s in spans)
        model = "a"  # the scripted stand-in's model is its script's name
        assert names == sorted(["invoke_agent a", "step 1", "step 2", "step 3", *[f"chat {model}"] * 3,
                                "execute_tool probe_read", "execute_tool probe_read"])  # fmt: skip
        assert {s["trace_id"] for s in spans} == {CALLER_TRACE}  # one trace: the caller's
        assert all(s["attributes"]["ticketiq.run.attempt"] == 1 for s in spans)
        assert all(s["attributes"]["ticketiq.process"] == h.process.engine.deps.holder for s in spans)
        by_id = {s["span_id"]: s for s in spans}
        attempt = next(s for s in spans if s["name"] == "invoke_agent a")
        assert attempt["parent_span_id"] == CALLER_SPAN
        assert attempt["span_id"] == f"{tracing.span_id(run_id, 'attempt', 1):016x}"  # derived, not random
        for span in spans:
            if span["name"].startswith("step "):
                assert span["parent_span_id"] == attempt["span_id"]
            elif span is not attempt:
                assert by_id[span["parent_span_id"]]["name"].startswith("step ")
        chats = [s for s in spans if s["name"] == f"chat {model}"]
        for chat in chats:
            assert chat["attributes"]["gen_ai.operation.name"] == "chat"
            assert chat["attributes"]["gen_ai.request.model"] == model
            assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        tools = [s for s in spans if s["name"] == "execute_tool probe_read"]
        for tool in tools:
            assert tool["attributes"]["gen_ai.tool.name"] == "probe_read"
            assert tool["attributes"]["ticketiq.tool.class"] == "read"
            assert tool["attributes"]["ticketiq.step.key"]
            assert "note" not in str(tool["attributes"])  # never the call's arguments
        # Each call the run sent carried its own span as the parent (W3C traceparent): the vendor saw it.
        sent = [r["traceparent"] for r in h.probe.received if r["run_id"] == run_id]
        assert sorted(sent) == sorted(f"00-{CALLER_TRACE}-{t['span_id']}-01" for t in tools)


async def test_a_run_started_without_a_traceparent_is_its_own_trace_named_by_its_id(
    db_url: str, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with traced_site(db_url, tmp_path, receiver, monkeypatch) as (client, _h):
        made = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-2"},
                                 headers={"traceparent": "not-a-traceparent"})  # fmt: skip
        run_id = made.json()["id"]
        assert (await ended(client, run_id))["status"] == "succeeded"
        assert await asyncio.to_thread(tracing.flush, 10.0)
        spans = receiver.of_run(run_id)
        assert {s["trace_id"] for s in spans} == {run_id.replace("-", "")}
        attempt = next(s for s in spans if s["name"] == "invoke_agent a")
        assert attempt["parent_span_id"] is None


async def test_a_collector_that_hangs_never_holds_a_run_and_the_spans_it_refuses_are_counted_dropped(
    db_url: str, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.hanging = asyncio.Event()  # the collector takes the request and does not answer
    async with traced_site(db_url, tmp_path, receiver, monkeypatch) as (client, _h):
        made = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-3"})
        assert (await ended(client, made.json()["id"]))["status"] == "succeeded"
        await asyncio.to_thread(tracing.flush, 0.5)  # its spans go out, and hang there
        assert receiver.requests >= 1 and not receiver.spans
        # Another run, while the collector hangs: its spans are sent beside it, never on its path.
        second = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-4"})
        assert (await ended(client, second.json()["id"]))["status"] == "succeeded"
        assert not receiver.spans
        receiver.refusing = 400  # now it answers, and refuses what it is sent
        receiver.hanging.set()
        await asyncio.to_thread(tracing.flush, 10.0)
        assert tracing.dropped() >= 10  # each of the runs' spans, counted
        scraped = (await client.get("/metrics")).text
        dropped = [line for line in scraped.splitlines() if line.startswith("ticketiq_trace_spans_dropped_total ")]
        assert dropped and float(dropped[0].split()[1]) >= 10


async def test_a_run_an_a2a_message_starts_continues_the_messages_trace(
    db_url: str, tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with traced_site(db_url, tmp_path, receiver, monkeypatch) as (client, _h):
        message = {"jsonrpc": "2.0", "id": "m-1", "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "check OPS-5"}],
            "metadata": {"agent": "a"}}}}  # fmt: skip
        sent = await client.post("/a2a", json=message, headers={
            "A2A-Version": "1.0", "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})  # fmt: skip
        assert sent.status_code == 200, sent.text
        run_id = sent.json()["result"]["task"]["id"]
        assert (await ended(client, run_id))["status"] == "succeeded"
        await asyncio.to_thread(tracing.flush, 10.0)
        spans = receiver.of_run(run_id)
        assert spans and {s["trace_id"] for s in spans} == {CALLER_TRACE}
        attempt = next(s for s in spans if s["name"] == "invoke_agent a")
        assert attempt["parent_span_id"] == CALLER_SPAN


async def test_spans_go_over_grpc_when_the_protocol_says_so(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver()
    with receiving_grpc(receiver) as endpoint:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        try:
            async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS) as h:
                token = await h.token("ops", "operator")
                async with (
                    serving(create_app(h.settings, h.process)) as base,
                    httpx.AsyncClient(
                        verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
                    ) as client,
                ):
                    made = await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-6"})
                    assert (await ended(client, made.json()["id"]))["status"] == "succeeded"
                    await asyncio.to_thread(tracing.flush, 10.0)
        finally:
            await asyncio.to_thread(tracing.stop)
    names = sorted(s["name"] for s in receiver.of_run(made.json()["id"]))
    assert names.count("chat a") == 3 and "invoke_agent a" in names
