"""The edge (HAProxy) in front of real `ticketiq serve` processes, and `ticketiq cluster`.

A client sends a steady stream through the edge while one app process is SIGKILLed and restarted on
its port, twice: no read is answered 5xx, the survivor serves through each outage, and every POST,
repeated by its client with the same Idempotency-Key until answered, made exactly one run. With
stand-in servers that take a request and die before answering, the edge is shown to send such a
POST once and to retry such a GET on another process."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.cluster import Cluster
from tests.support.cluster_process import cli, cluster_env, end_cluster, gone, launch_cluster, pids, wait_for_count
from tests.support.http import TLS, web
from ticketiq.dbserver.authentication import password_of
from ticketiq.operate.edge import Backend, start_edge
from ticketiq.operate.launch import Child, free_port, start_serve

TICK_S = 0.02
RETRIED = (409, 502, 503, 504)  # the key is still being answered, or the request may not have been


@dataclass
class Answer:
    what: str  # readyz, run, post
    at: float  # time.monotonic() when it was answered
    status: int | None  # None: no HTTP answer at all
    process: str | None = None  # the identity that answered a /readyz
    detail: str = ""  # the error, or the start of the body


@dataclass
class Stream:
    """A client of the edge: every tick a readiness probe, a read of a known run and a keyed POST
    that is repeated with its key until it is answered."""

    base: str
    auth: dict[str, str]
    run_id: str
    prefix: str
    answers: list[Answer] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)  # key -> the run id its answer named
    tries: dict[str, list[int | None]] = field(default_factory=dict)  # key -> each try's status
    halt: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="edge-client", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Once its POST in hand is answered (a minute at most)."""
        self.halt.set()
        if self.thread is not None:
            self.thread.join(90)

    def _run(self) -> None:
        with httpx.Client(verify=TLS, base_url=self.base, headers=self.auth, timeout=30) as client:
            n = 0
            while not self.halt.is_set():
                self._get(client, "readyz", "/readyz")
                self._get(client, "run", f"/v1/runs/{self.run_id}")
                self._post(client, f"{self.prefix}-{n}")
                n += 1
                self.halt.wait(TICK_S)

    def _get(self, client: httpx.Client, what: str, path: str) -> None:
        try:
            response = client.get(path)
        except httpx.TransportError as exc:
            self.answers.append(Answer(what, time.monotonic(), None, detail=repr(exc)))
            return
        process = response.json().get("process") if what == "readyz" and response.status_code == 200 else None
        self.answers.append(Answer(what, time.monotonic(), response.status_code, process, response.text[:200]))

    def _post(self, client: httpx.Client, key: str) -> None:
        """One logical request: the same key until an answer that is not a reason to repeat it."""
        tries = self.tries.setdefault(key, [])
        body = {"agent": "reader", "input": f"Read OPS-{700 + len(self.tries) % 100}"}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                response = client.post("/v1/runs", json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError:
                tries.append(None)
                time.sleep(0.05)
                continue
            tries.append(response.status_code)
            if response.status_code not in RETRIED:
                if response.status_code == 201:
                    self.created[key] = str(response.json()["id"])
                self.answers.append(Answer("post", time.monotonic(), response.status_code))
                return
            time.sleep(0.05)

    def served(self, since: float, until: float) -> list[Answer]:
        return [a for a in list(self.answers) if since <= a.at <= until and a.status in (200, 201)]

    def processes_since(self, since: float) -> set[str]:
        return {a.process for a in list(self.answers) if a.at >= since and a.process}


def identity(base: str) -> str:
    """The process identity behind an app process's port, as its /readyz names it."""
    return str(web.get(f"{base}/readyz", timeout=10).json()["process"])


def reaches(stream: Stream, process: str, since: float, timeout_s: float = 10) -> None:
    """Wait until the edge sent one of the stream's /readyz to this process identity."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process in stream.processes_since(since):
            return
        time.sleep(0.05)
    raise AssertionError(f"the edge sent no request to {process} within {timeout_s} s")


@pytest.mark.long
def test_the_edge_serves_through_a_process_killed_and_restarted_twice_and_each_post_makes_one_run(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster()
    survivor = cluster.app("app1")  # started first: it leads
    victim_port = free_port()
    victim, victim_base = start_serve(cluster.env, cluster.tmp, port=victim_port, name="app2")
    edge: Child | None = None
    stream: Stream | None = None
    try:
        edge_port = free_port()
        backends = [Backend("app1", "127.0.0.1", int(survivor.base.rsplit(":", 1)[1])),
                    Backend("app2", "127.0.0.1", victim_port)]  # fmt: skip
        edge = start_edge(edge_port, backends, tmp_path / "edge")
        base = f"http://127.0.0.1:{edge_port}"
        known = web.post(f"{base}/v1/runs", json={"agent": "reader", "input": "Read OPS-700"},
                           headers=cluster.auth, timeout=30)  # fmt: skip
        assert known.status_code == 201, known.text
        prefix = f"edge-{uuid.uuid4().hex[:8]}"
        stream = Stream(base, cluster.auth, str(known.json()["id"]), prefix)
        stream.start()
        survivor_id = identity(survivor.base)
        outages: list[tuple[float, float]] = []  # when the survivor was alone
        reaches(stream, identity(victim_base), 0.0)
        for _ in range(2):
            time.sleep(1.0)
            victim.kill()
            # From a moment after the kill: an answer read just before it may be noted just after it.
            killed_at = time.monotonic() + 0.1
            time.sleep(2.0)
            outages.append((killed_at, time.monotonic()))
            victim, victim_base = start_serve(cluster.env, cluster.tmp, port=victim_port, name="app2")
            reaches(stream, identity(victim_base), time.monotonic())  # the edge takes it back
        time.sleep(1.0)
        stream.stop()
        assert stream.thread is not None and not stream.thread.is_alive(), "the client did not end"

        answers = list(stream.answers)
        gets = [a for a in answers if a.what in ("readyz", "run")]
        failed = [a for a in gets if a.status is None or a.status >= 500]
        summary = (f"{len(gets)} GETs through the edge, {len(failed)} answered 5xx or not at all "
                   f"(first: {failed[:3]}); {len(stream.tries)} keyed POSTs, "
                   f"{sum(len(t) > 1 for t in stream.tries.values())} repeated by their client, tries "
                   f"{sum(len(t) for t in stream.tries.values())}")  # fmt: skip
        assert failed == [], f"{summary}\n--- edge log ---\n{edge.log_tail()}"
        for since, until in outages:
            during = stream.served(since, until)
            who = {a.process for a in during if a.process}
            assert len(during) >= 5, f"{len(during)} requests served in an outage of {until - since:.1f} s; {summary}"
            assert who == {survivor_id}, f"in an outage /readyz was answered by {who}, not by the survivor alone"

        unanswered = {k: t for k, t in stream.tries.items() if k not in stream.created}
        assert unanswered == {}, f"POSTs that never got their run: {unanswered}; {summary}"
        # The run's key is the client's key in its token's namespace (run_keys.api: api<TAB><token><TAB><key>).
        rows = cluster.rows(
            "SELECT split_part(idempotency_key, E'\\t', 3) AS key, id::text AS id FROM runs "
            "WHERE channel = 'api' AND split_part(idempotency_key, E'\\t', 3) LIKE %s",
            f"{prefix}-%",
        )
        runs = {r["key"]: r["id"] for r in rows}
        assert runs == stream.created, (
            f"{len(runs)} runs in the database for {len(stream.created)} keyed POSTs; keys with another or "
            f"no run: {sorted(k for k in stream.created if runs.get(k) != stream.created[k])[:10]}; {summary}"
        )
        # The run's own key is the record a repeat is answered from (issue 19): no Idempotency-Key row is
        # claimed or kept beside it, so a POST costs no statement of its own for the key.
        kept = cluster.rows(
            "SELECT key FROM idempotency_keys WHERE scope = 'POST /v1/runs' AND key LIKE %s", f"{prefix}-%"
        )
        assert kept == [], f"{len(kept)} Idempotency-Key rows for {len(stream.created)} POSTs; {summary}"
    finally:
        if stream is not None:
            stream.stop()  # before the edge: its POST in hand is answered, not retried against nothing
        if edge is not None:
            edge.stop()
        victim.stop()


# ----- the edge's retries, with stand-ins that die before answering -----------------------------------


@dataclass
class StandinProcess:
    """An HTTP server on a real socket that answers /readyz 200 and, unless it `answers`, reads every
    other request and closes the connection without a byte: a process that died while answering."""

    answers: bool
    received: list[str] = field(default_factory=list)
    sock: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed: the test is over
            with conn:
                conn.settimeout(5)
                line = read_request(conn)
                if " /readyz " in line:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    continue
                self.received.append(line)
                if self.answers:
                    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")


def read_request(conn: socket.socket) -> str:
    """Read a whole request, its body too (a close with unread bytes would be a reset, not an empty
    answer); return its request line."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length is not None and len(body) < int(length.group(1)):
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head.split(b"\r\n", 1)[0].decode(errors="replace")


@pytest.fixture
def dying_and_answering() -> Iterator[tuple[StandinProcess, StandinProcess]]:
    dying, answering = StandinProcess(answers=False), StandinProcess(answers=True)
    for server in (dying, answering):
        threading.Thread(target=server.serve, daemon=True).start()
    try:
        yield dying, answering
    finally:
        dying.sock.close()
        answering.sock.close()


COUNT = 20


def test_the_edge_sends_a_post_that_reached_a_process_once_and_retries_a_get_on_another(
    dying_and_answering: tuple[StandinProcess, StandinProcess], tmp_path: Path
) -> None:
    dying, answering = dying_and_answering
    port = free_port()
    backends = [Backend("dying", "127.0.0.1", dying.port), Backend("answering", "127.0.0.1", answering.port)]
    edge = start_edge(port, backends, tmp_path)
    try:
        base = f"http://127.0.0.1:{port}"
        # Without the rule that keeps a POST to conn-failure, HAProxy 2.6 sends some of these twice.
        posts = [web.post(f"{base}/v1/runs/{i}", json={"i": i}, timeout=30).status_code for i in range(COUNT)]
        gets = [web.get(f"{base}/v1/runs/{i}", timeout=30).status_code for i in range(COUNT)]
    finally:
        edge.stop()
    sent = [line for line in dying.received + answering.received if line.startswith("POST")]
    assert sorted(sent) == sorted(f"POST /v1/runs/{i} HTTP/1.1" for i in range(COUNT)), sent  # each once
    reached_dying = [line for line in dying.received if line.startswith("POST")]
    assert reached_dying, "no POST reached the dying process: the test shows nothing"
    assert posts.count(502) == len(reached_dying), posts  # answered 502: its client repeats it with its key
    assert gets == [200] * COUNT, gets
    assert any(line.startswith("GET") for line in dying.received)  # so these GETs were retried elsewhere


# ----- `ticketiq cluster` -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--processes", "0"], "--processes must be at least 1"), (["--port", "70000"], "--port must be a TCP port")],
)
def test_cluster_refuses_bad_input_before_starting_anything(tmp_path: Path, args: list[str], says: str) -> None:
    done = subprocess.run(cli("cluster", *args), env=cluster_env(tmp_path, None), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2, done
    assert says in done.stderr
    assert "pid" not in done.stdout
    assert not (tmp_path / "home").exists()  # not even the embedded Postgres was started


def test_cluster_refuses_a_port_in_use_before_starting_anything(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(cli("cluster", "--port", str(port)), env=cluster_env(tmp_path, None),
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert not (tmp_path / "home").exists()


@pytest.mark.long
def next_process_on(cluster_pid: int, port: int, seen: list[int], timeout_s: float = 60.0) -> int:
    """The pid of the app process the cluster starts next on `port` (one not in `seen`), once it exists."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(cluster_pid).children():
                with contextlib.suppress(psutil.Error):
                    line = child.cmdline()
                    if child.pid not in seen and "serve" in line and str(port) in line:
                        return int(child.pid)
        assert time.monotonic() < deadline, f"no new process on port {port} within {timeout_s:.0f} s"
        time.sleep(0.05)


def test_cluster_starts_a_killed_process_again_leaves_a_crash_loop_down_and_stops_everything_on_sigint(
    tmp_path: Path, db_url: str
) -> None:
    port = free_port()
    env = cluster_env(tmp_path, db_url)
    proc, lines = launch_cluster(env, port)
    seen: list[int] = []
    pid_file = Path(env["TICKETIQ_HOME"]) / "cluster.pid"
    try:
        started = pids(lines)
        assert set(started) == {"stand-ins", "app1", "app2", "edge"}, lines
        # The database's password reaches the processes (their environment), never the output or a log.
        secret = password_of(db_url)
        assert secret is not None and secret not in "".join(lines)
        assert any(line.startswith("database  postgresql://postgres:***@127.0.0.1:") for line in lines), lines
        assert pid_file.read_text().strip() == str(proc.pid)
        # A second cluster on the same home is refused, and starts nothing.
        second = subprocess.run(cli("cluster", "--port", str(free_port())), env=env, capture_output=True, text=True,
                                timeout=60)  # fmt: skip
        assert second.returncode == 2, second
        assert f"a cluster already runs on {env['TICKETIQ_HOME']} (pid {proc.pid}" in second.stderr
        assert pid_file.read_text().strip() == str(proc.pid)
        assert len(edge_answers(port, 6)) == 2  # both processes take requests through the edge

        # Killed: started again on its port after 1 s, and back in the edge's rotation.
        seen.append(started["app2"])
        os.kill(started["app2"], signal.SIGKILL)
        wait_for_count(lines, "started again", 1, 90)  # a loaded machine takes long to make a process ready
        said = "".join(lines)
        assert f"app2 (pid {started['app2']}) was killed by SIGKILL; starting it again in 1 s (died once" in said
        again = pids(lines)["app2"]
        assert again != started["app2"] and not gone(again)
        deadline = time.monotonic() + 10
        while len(edge_answers(port, 6)) < 2:
            assert time.monotonic() < deadline, "the process started again never got requests through the edge"

        # Killed each time it is back, four times more: five deaths within a minute are a crash loop. Each
        # new process is killed as soon as it exists, not once ready: on a loaded machine a start takes up
        # to 20 s to be ready, and four of them then outlast the minute a crash loop is counted over.
        found = re.search(r"app2\s+pid \d+: http://127\.0\.0\.1:(\d+)", said)
        assert found is not None, said
        port2 = int(found.group(1))
        seen.append(again)
        os.kill(again, signal.SIGKILL)
        for _death in range(3, 6):  # the third, fourth and fifth deaths
            seen.append(next_process_on(proc.pid, port2, seen))
            os.kill(seen[-1], signal.SIGKILL)
        wait_for_count(lines, "a crash loop", 1, 60)
        said = "".join(lines)
        assert (
            f"app2 (pid {seen[-1]}) was killed by SIGKILL; it died 5 times within 60 s, a crash loop: it is left down"
            in said
        )
        delays = [
            line.split("starting it again in ")[1].split(" s")[0] for line in lines if "starting it again in" in line
        ]
        assert delays == ["1", "2", "4", "8"], delays
        time.sleep(2)
        with pytest.raises(AssertionError, match="no new process"):  # not started again
            next_process_on(proc.pid, port2, seen, timeout_s=1.0)
        assert proc.poll() is None
        assert len(edge_answers(port, 4)) == 1  # app1 serves alone

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(lines)
        wait_for_count(lines, "stopped edge", 1, 10)
        assert [name for name, pid in pids(lines).items() if not gone(pid)] == []
        assert all(gone(pid) for pid in seen)
        assert not pid_file.exists()
        logs = [p for p in tmp_path.glob("ticketiq-cluster-*/*") if p.is_file()]
        assert logs and not [p.name for p in logs if secret in p.read_text(errors="replace")]
    finally:
        end_cluster(proc, lines, seen)


def edge_answers(port: int, n: int) -> set[Any]:
    """The process identities that answered n /readyz through the edge; each answer is 200."""
    answered: set[Any] = set()
    for _ in range(n):
        response = web.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
        assert response.status_code == 200, response.text
        answered.add(response.json()["process"])
    return answered
