"""An OTLP/HTTP trace receiver for the tests: `POST /v1/traces` decoded with opentelemetry-proto, each span
kept as a plain dict. It can be told to refuse (a status) or to hang, as a collector that is down or slow."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import uvicorn
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ticketiq.standins.server import listen


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


@dataclass
class Receiver:
    spans: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    refusing: int | None = None  # answer with this status: a collector that is down (503) or refuses (400)
    hanging: asyncio.Event | None = None  # answer only once set: a collector that is slow

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self.receive, methods=["POST"])])

    async def receive(self, request: Request) -> Response:
        self.requests += 1
        if self.hanging is not None:
            await self.hanging.wait()
        if self.refusing is not None:
            return Response(status_code=self.refusing)
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        self.keep(message)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type="application/x-protobuf")

    def keep(self, message: ExportTraceServiceRequest) -> None:
        for resource in message.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append({
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex() or None,
                        "kind": span.kind,
                        "start_ns": span.start_time_unix_nano,
                        "end_ns": span.end_time_unix_nano,
                        "attributes": {a.key: _value(a.value) for a in span.attributes},
                        "status": (span.status.code, span.status.message),
                        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                        "resource": service,
                    })  # fmt: skip

    def of_run(self, run_id: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["attributes"].get("ticketiq.run.id") == run_id]


@contextlib.contextmanager
def receiving_in_thread(receiver: Receiver) -> Iterator[str]:
    """The receiver served from a thread of its own (for tests that drive processes synchronously); its
    base URL while the block runs, stopped after it, even when the test failed."""
    sock = listen(0)
    server = uvicorn.Server(uvicorn.Config(receiver.app(), log_config=None, access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the OTLP receiver did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


class _GrpcTraces(TraceServiceServicer):
    def __init__(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:
        self.receiver.requests += 1
        self.receiver.keep(request)
        return ExportTraceServiceResponse()


@contextlib.contextmanager
def receiving_grpc(receiver: Receiver) -> Iterator[str]:
    """The receiver as an OTLP/gRPC endpoint (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): its address while the block
    runs, stopped after it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    add_TraceServiceServicer_to_server(_GrpcTraces(receiver), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop(grace=None)
