"""A `ticketiq serve` process told to stop (SIGTERM) ends the event streams it has open, so its shutdown
is not held by a browser that follows a run (uvicorn waits for every open connection before it stops).
sse-starlette learns of the exit from the signal handler uvicorn installs."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

from tests.browser.rig import start_console
from tests.support.http import web


def test_sigterm_ends_an_open_event_stream_and_the_process(db_url: str, tmp_path: Path) -> None:
    site = start_console(db_url, tmp_path)
    try:
        # A grace far longer than the bound waited below: only the stream ending lets the process exit.
        app = site.cluster.app("held", shutdown_grace_s=600)
        token = site.cluster.token
        run_id = web.post(f"{app.base}/v1/runs", json={"agent": "asker", "input": "Note OPS-1"},
                            headers={"Authorization": f"Bearer {token}"}, timeout=30).json()["id"]  # fmt: skip
        site.waiting(run_id, "input")
        opened, lines, ended = threading.Event(), [], threading.Event()

        def follow() -> None:
            with web.stream("GET", f"{app.base}/v1/runs/{run_id}/events",
                              headers={"Authorization": f"Bearer {token}"}, timeout=120) as stream:  # fmt: skip
                for line in stream.iter_lines():
                    lines.append(line)
                    opened.set()
            ended.set()

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        assert opened.wait(60), "the stream never opened"
        app.child.proc.send_signal(signal.SIGTERM)
        try:
            app.child.proc.wait(60)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"the process did not stop with a stream open\n{app.child.log_tail()}") from exc
        assert ended.wait(30), "the stream was not closed by the server"
        assert app.child.proc.returncode == -signal.SIGTERM  # it stopped as told, not killed
        assert "timeout graceful shutdown exceeded" not in app.child.log_tail(20_000)
        assert lines[0].startswith("event: ") and not any(line == "event: end" for line in lines)
    finally:
        site.cluster.stop()
