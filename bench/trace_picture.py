"""The picture of one crash-resumed run's trace in docs/observability.md, drawn from the spans a real OTLP
receiver got (no Jaeger here: its waterfall, drawn the way Jaeger draws one).

    .venv/bin/python bench/trace_picture.py [--out docs/observability/crash-trace.png]

Everything for real: an embedded Postgres, the stand-ins (model latency 1 s), two `ticketiq serve` processes
sending traces over OTLP/HTTP to a receiver in this process (it decodes the protobuf), one triage run started
on the second, which is SIGKILLed at its second step. Once the first has finished the run and sent its
spans, the run's trace is drawn: one bar a span, under its parent, coloured by attempt; the spans the
survivor wrote for the killed process (`ticketiq.written_by`) hatched; the takeover and its links named.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import threaded_server
from ticketiq.dbserver import embedded
from ticketiq.operate.launch import start_serve, start_standins

SEAL_KEYS = "bench:trace-picture-secret"


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    return None if kind is None else getattr(v, kind)


class Receiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    async def traces(self, request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        for resource in message.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append({
                        "name": span.name, "span_id": span.span_id.hex(), "parent": span.parent_span_id.hex() or None,
                        "start": span.start_time_unix_nano, "end": span.end_time_unix_nano,
                        "attributes": {a.key: _value(a.value) for a in span.attributes}, "error": span.status.code == 2,
                        "links": [link.span_id.hex() for link in span.links],
                    })  # fmt: skip
        return Response(b"", media_type="application/x-protobuf")

    def serving(self) -> contextlib.AbstractContextManager[str]:
        return threaded_server.serving(Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])]))


def crash_resumed_run(folder: Path, collector: str) -> str:
    server = embedded.acquire(folder / "home")
    children = []
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKETIQ_", "OTEL_"))}
        env.update({"TICKETIQ_DATABASE_URL": server.url(), "TICKETIQ_HOME": str(folder / "home"),
                    "TICKETIQ_SEAL_KEYS": SEAL_KEYS, "TICKETIQ_LOG_LEVEL": "WARNING"})  # fmt: skip
        standins = start_standins(env, folder, "--model-latency-ms", "1000")
        children.append(standins)
        env.update({k: v for k, v in standins.env.items() if k != "TICKETIQ_DATABASE_URL"})
        made = subprocess.run(
            [sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", "picture", "--role", "operator"],
            env=env, capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
        token = made.stdout.strip()
        traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        survivor, survivor_url = start_serve({**traced, "TICKETIQ_LEAD": "true"}, folder, name="survivor")
        children.append(survivor)
        victim, base = start_serve({**traced, "TICKETIQ_LEAD": "false"}, folder, name="victim")
        children.append(victim)
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
            run_id = str(client.post("/v1/runs", json={"agent": "triage", "input": "Triage OPS-4242"}).json()["id"])
            deadline = time.monotonic() + 60
            while client.get(f"/v1/runs/{run_id}").json()["steps"] < 2:
                assert time.monotonic() < deadline, "the run never reached its second step"
                time.sleep(0.05)
        os.kill(victim.pid, signal.SIGKILL)
        with httpx.Client(base_url=survivor_url, headers={"Authorization": f"Bearer {token}"}, timeout=70) as client:
            while client.get(f"/v1/runs/{run_id}", params={"wait": 60}).json()["status"] not in ("succeeded", "failed"):
                pass
        time.sleep(2.0)  # the survivor's last batch
        return run_id
    finally:
        for child in reversed(children):
            child.stop()
        embedded.stop(server.home)


def draw(spans: list[dict[str, Any]], run_id: str, out: Path) -> None:
    by_id = {s["span_id"]: s for s in spans}  # a span sent twice is one span
    children: dict[str | None, list[dict[str, Any]]] = {}
    for span in by_id.values():
        parent = span["parent"] if span["parent"] in by_id else None
        children.setdefault(parent, []).append(span)
    order: list[tuple[int, dict[str, Any]]] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(children.get(parent, []), key=lambda s: s["start"]):
            order.append((depth, span))
            walk(span["span_id"], depth + 1)

    walk(None, 0)
    t0 = min(s["start"] for s in by_id.values())
    colours = {1: "#d9534f", 2: "#2b7bb9"}
    fig, ax = plt.subplots(figsize=(12, 0.34 * len(order) + 1.4))
    for row, (depth, span) in enumerate(order):
        attempt = span["attributes"].get("ticketiq.run.attempt", 0)
        written = bool(span["attributes"].get("ticketiq.written_by"))
        start, width = (span["start"] - t0) / 1e9, max((span["end"] - span["start"]) / 1e9, 0.02)
        ax.barh(row, width, left=start, color=colours.get(attempt, "#888"), alpha=0.55 if written else 0.9,
                hatch="//" if written else None, edgecolor="black" if span["error"] else "none")  # fmt: skip
        label = "  " * depth + span["name"] + (f"  (attempt {attempt})" if span["name"].startswith("invoke") else "")
        if span["attributes"].get("ticketiq.call.status"):
            label += f"  [{span['attributes']['ticketiq.call.status']}]"
        ax.text(-0.02, row, label, ha="right", va="center", fontsize=8, family="monospace")
    ax.set_yticks([])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run's first span")
    ax.set_title(f"Trace of run {run_id} (trace id {run_id.replace('-', '')}): red, the attempt on the killed "
                 "process;\nhatched, the spans it never sent, written by the survivor; blue, the survivor's attempt",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}: {len(by_id)} spans")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/observability/crash-trace.png"))
    args = parser.parse_args()
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="ticketiq-trace-") as tmp, receiver.serving() as collector:
        run_id = crash_resumed_run(Path(tmp), collector)
    draw([s for s in receiver.spans if s["attributes"].get("ticketiq.run.id") == run_id], run_id, args.out)


if __name__ == "__main__":
    main()
