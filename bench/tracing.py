"""What tracing costs a step (issue 36): the same runs served with traces off and on, side by side in one run.

    .venv/bin/python bench/tracing.py [--runs 300] [--in-flight 32] [--rounds 2]

Two sides of this tree, each round on a fresh database and one `ticketiq serve` process with stand-ins at
model latency 0, driven as bench/client.py drives them (POST /v1/runs, then one `GET ?wait=30`): `off`, no
OTLP endpoint (tracing is never started), and `on`, OTEL_EXPORTER_OTLP_ENDPOINT pointing at a collector
of this bench's own (a thread answering every export with an empty success; it reads nothing, so the
app's CPU is what sending costs). Rounds alternate (off, on, off, on). Per side: the app process's CPU a
run and, a `reader` run making 4 model steps and 3 tool calls, a step (model call, its tool calls and its
checkpoint); then `on` less `off` a step, and the spans the collector took. It prints figures and
asserts none.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import client
import scale
import threaded_server
from ticketiq.dbserver import embedded

STEPS_A_RUN = 4  # a `reader` run: three read steps and the answer, each a model call


class Collector:
    """An OTLP/HTTP endpoint that takes every export and answers an empty success (a valid response)."""

    def __init__(self) -> None:
        self.exports = 0
        self.bytes = 0

    async def traces(self, request: Request) -> Response:
        self.bytes += len(await request.body())
        self.exports += 1
        return Response(b"", media_type="application/x-protobuf")

    def serving(self) -> contextlib.AbstractContextManager[str]:
        return threaded_server.serving(Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args()
    # What bench/client.py's `measure` reads of its arguments.
    args.warmup, args.idle_s, args.poll_s, args.principal_cap = 10, 0.0, 0.25, 0
    collector = Collector()
    figures: dict[str, Any] = {"rounds": []}
    with tempfile.TemporaryDirectory(prefix="ticketiq-tracing-") as tmp, collector.serving() as endpoint:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        traced = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        sides = [client.Side("off", "traces off", 30.0, None),
                 client.Side("on", "traces on (OTLP/HTTP)", 30.0, None, extra=traced)]  # fmt: skip
        try:
            figures["machine"] = scale.machine(server.url())
            print(f"machine: {figures['machine']}")
            for side in sides:
                client.start_standins_of(side, server, folder)
            for round_ in range(1, args.rounds + 1):
                for side in sides:
                    before = collector.exports
                    found = client.measure(side, server, folder, round_, args, None)
                    found.update(side=side.name, round=round_, exports=collector.exports - before)
                    figures["rounds"].append(found)
                    sent = f", {found['exports']} exports to the collector" if side.name == "on" else ""
                    print(f"  round {round_} {side.label:24} {found['succeeded']}/{found['runs']} succeeded, "
                          f"{found['app_cpu_ms_per_run']:6.2f} ms of app CPU a run, "
                          f"{found['app_cpu_ms_per_run'] / STEPS_A_RUN:5.3f} ms a step{sent}")  # fmt: skip
        finally:
            for side in sides:
                if side.standins is not None:
                    side.standins.stop()
            embedded.stop(server.home)
    per_run = {s.name: statistics.median(r["app_cpu_ms_per_run"] for r in figures["rounds"] if r["side"] == s.name)
               for s in sides}  # fmt: skip
    figures["app_cpu_ms_per_run"] = per_run
    figures["tracing_ms_per_step"] = round((per_run["on"] - per_run["off"]) / STEPS_A_RUN, 3)
    print(f"app CPU a run, the median of the rounds: off {per_run['off']:.2f} ms, on {per_run['on']:.2f} ms "
          f"({per_run['on'] / per_run['off']:.2f}x); tracing costs {figures['tracing_ms_per_step']:.3f} ms a step "
          f"({os.cpu_count()} cores; {collector.bytes / 1e6:.1f} MB of spans sent)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
