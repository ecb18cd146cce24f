"""Event streams are bounded and end with their credential (issue 32), over real sockets on the real
Postgres: a principal's cap and the process's, answered 429 with Retry-After while /readyz stays 200; a
stream that lasts its most and is followed on with Last-Event-ID, nothing lost nor told twice; a token
revoked, or a console session signed out, on another process ends the streams opened with it; a
revocation the listener did not hear is found by the credential look; one feed reads for all the streams
of a run, and a waiting run is not polled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.integration.test_console import Site, csrf_of, site
from tests.support.crash import eventually
from tests.support.engine import read_rows
from tests.support.tcp_proxy import TcpProxy
from ticketiq.console import sessions
from ticketiq.views import follows

TERMINAL = ("succeeded", "failed", "interrupted", "stopped")


@dataclass
class Stream:
    """What one events stream said: its events (event, data, id or None), its comments, how it ended."""

    status: int
    headers: httpx.Headers
    events: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    retry: int | None = None
    closed: bool = False  # the server ended it

    @property
    def last_id(self) -> str | None:
        return next((i for _, _, i in reversed(self.events) if i is not None), None)


class Reader:
    """Reads an open stream's lines into its `Stream`, in the background."""

    def __init__(self, response: httpx.Response) -> None:
        self.stream = Stream(response.status_code, response.headers)
        self._task = asyncio.create_task(self._read(response))

    async def _read(self, response: httpx.Response) -> None:
        event: str | None = None
        data: str | None = None
        said_id: str | None = None
        async for line in response.aiter_lines():
            if line.startswith(":"):
                self.stream.comments.append(line[1:].strip())
            elif line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                data = line.removeprefix("data:").strip()
            elif line.startswith("id:"):
                said_id = line.removeprefix("id:").strip()
            elif line.startswith("retry:"):
                self.stream.retry = int(line.removeprefix("retry:").strip())
            elif not line and event is not None and data is not None:
                self.stream.events.append((event, json.loads(data), said_id))
                event = data = said_id = None
        self.stream.closed = True

    async def until(self, what: str, check: Any, timeout_s: float = 30.0) -> None:
        async def seen() -> bool:
            return bool(check(self.stream))

        await eventually(seen, timeout_s, what)

    async def closed(self, timeout_s: float) -> float:
        """Seconds until the server ended the stream (AssertionError when it did not within `timeout_s`)."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._task)
        except TimeoutError:
            raise AssertionError(f"the stream was still open after {timeout_s} s: {self.stream}") from None
        return time.monotonic() - started


@asynccontextmanager
async def opened(client: httpx.AsyncClient, path: str, **headers: str) -> AsyncIterator[Reader]:
    async with client.stream("GET", path, headers=headers) as response:
        reader = Reader(response)
        try:
            yield reader
        finally:
            reader._task.cancel()
            await asyncio.gather(reader._task, return_exceptions=True)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def give_input(s: Site, token: str, run_id: str, text: str) -> None:
    run = (await s.client.get(f"/v1/runs/{run_id}", headers=bearer(token))).json()
    question = run["waiting_for"]["question_id"]
    given = await s.client.post(f"/v1/runs/{run_id}/input", json={"text": text, "question_id": question},
                                headers=bearer(token))  # fmt: skip
    assert given.status_code == 202, given.text


async def test_a_principal_and_the_process_hold_their_caps_and_the_rest_is_429_while_readyz_stays_200(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, max_streams_per_principal=3, max_streams=5, stream_max_s=120.0) as s:
        alice = await s.h.token("alice", "caller")
        ops = await s.h.token("ops", "operator")
        admin = await s.h.token("root", "admin")
        run_id = await s.run_waiting(alice, "asker")
        path = f"/v1/runs/{run_id}/events"
        async with AsyncExitStack() as held:
            alices = [await held.enter_async_context(opened(s.client, path, **bearer(alice))) for _ in range(3)]
            for reader in alices:
                await reader.until("the run's status told", lambda st: st.events)
            refused = [await s.client.get(path, headers=bearer(alice)) for _ in range(30)]
            ready = [(await s.client.get("/readyz")).status_code for _ in range(5)]
            assert {r.status_code for r in refused} == {429}
            answer = refused[0]
            assert 1 <= int(answer.headers["Retry-After"]) <= 120
            assert answer.json()["detail"][0]["loc"] == ["header", "Authorization"]
            assert "TICKETIQ_MAX_STREAMS_PER_PRINCIPAL=3" in answer.json()["detail"][0]["msg"]
            assert ready == [200] * 5
            # The operator takes the process's last two; then anyone is refused, naming the process's cap.
            [await held.enter_async_context(opened(s.client, path, **bearer(ops))) for _ in range(2)]
            full = await s.client.get(path, headers=bearer(admin))
            assert full.status_code == 429 and "TICKETIQ_MAX_STREAMS=5" in full.json()["detail"][0]["msg"]
            assert full.json()["detail"][0]["loc"] == [] and int(full.headers["Retry-After"]) >= 1
            assert (await s.client.get("/readyz")).status_code == 200
            runs = await s.client.get("/v1/runs?limit=50", headers=bearer(ops))
            assert runs.status_code == 200 and run_id in [r["id"] for r in runs.json()["runs"]]
            assert len(s.h.process.follows) == 5
        # Each stream closed gave its slot back.
        await eventually(lambda: _is(len(s.h.process.follows) == 0), 10, "the follows given back")
        async with opened(s.client, path, **bearer(alice)) as again:
            assert again.stream.status == 200


async def test_a_stream_lasts_its_most_and_is_followed_on_from_its_last_id_nothing_lost_nor_told_twice(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, stream_max_s=1.5) as s:
        alice = await s.h.token("alice", "caller")
        run_id = await s.run_waiting(alice, "asker")
        path = f"/v1/runs/{run_id}/events"
        async with opened(s.client, path, **bearer(alice)) as first:
            lasted = await first.closed(10)
        assert first.stream.status == 200 and first.stream.closed and 1.0 < lasted < 5.0
        assert first.stream.comments[-1].startswith("a stream lasts at most 1.5 s: reconnect with Last-Event-ID")
        assert first.stream.retry == 1000
        told = first.stream.events
        assert told[0][0] == "status" and told[0][1]["status"] == "waiting"
        assert all(i is None for _, _, i in told[:-1]) and told[-1][2] is not None  # one id, on the batch's last
        # Followed on while nothing changed: nothing is told again, and it ends at its most again.
        async with opened(s.client, path, **bearer(alice), **{"Last-Event-ID": told[-1][2] or ""}) as quiet:
            await quiet.closed(10)
        assert quiet.stream.events == []
        # The run goes on between two streams: the next is told only what changed, and the end.
        await give_input(s, alice, run_id, "staging")
        await eventually(lambda: _ended(s, alice, run_id), 30, "the run ended")
        async with opened(s.client, path, **bearer(alice), **{"Last-Event-ID": told[-1][2] or ""}) as on:
            await on.closed(10)
        after = on.stream.events
        assert after[-1][0] == "end" and after[-1][2] is not None
        final = (await s.client.get(f"/v1/runs/{run_id}/timeline", headers=bearer(alice))).json()
        shown: dict[tuple[str, int], Any] = {}
        for event, data, _ in told + after:
            if event in ("attempt", "step"):
                assert shown.get((event, data[event])) != data, f"{event} {data[event]} told twice unchanged"
                shown[(event, data[event])] = data
        assert shown == {**{("attempt", a["attempt"]): a for a in final["attempts"]},
                         **{("step", st["step"]): st for st in final["steps"]}}  # fmt: skip
        assert [d for e, d, _ in after if e == "status"][-1]["status"] == "succeeded"
        # Followed on from the end: nothing more (204: an EventSource reconnects no more).
        done = await s.client.get(path, headers={**bearer(alice), "Last-Event-ID": after[-1][2] or ""})
        assert done.status_code == 204
        bad = await s.client.get(path, headers={**bearer(alice), "Last-Event-ID": "7"})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["header", "Last-Event-ID"]


async def _ended(s: Site, token: str, run_id: str) -> bool:
    got = await s.client.get(f"/v1/runs/{run_id}", headers=bearer(token))
    return bool(got.json()["status"] in TERMINAL)


async def _is(value: bool) -> bool:
    return value


async def test_a_token_revoked_or_a_session_signed_out_on_another_process_ends_its_streams(
    db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with site(db_url, tmp_path / "one") as one, site(db_url, tmp_path / "two", lead=False) as two:
        admin = await one.h.token("root", "admin")
        alice = await one.h.token("alice", "caller")
        bob = await one.h.token("bob", "caller")
        run_id = await one.run_waiting(alice, "asker")
        bobs = await one.run_waiting(bob, "asker")
        path = f"/v1/runs/{run_id}/events"
        async with (
            two.sign_in(bob) as console,
            opened(two.client, path, **bearer(alice)) as by_token,
            opened(console, f"/v1/runs/{bobs}/events") as by_session,
            opened(two.client, f"/v1/runs/{bobs}/events", **bearer(bob)) as bobs_token,
        ):
            for reader in (by_token, by_session, bobs_token):
                await reader.until("the run's status told", lambda st: st.events)
            # Revoked on the first process: the second hears it and ends alice's stream only.
            revoked_at = time.monotonic()
            assert (await one.client.delete("/v1/tokens/alice", headers=bearer(admin))).status_code == 200
            await by_token.closed(2.0)
            took = time.monotonic() - revoked_at
            assert by_token.stream.comments[-1] == f"the stream ended: {follows.REVOKED}"
            assert not by_session.stream.closed and not bobs_token.stream.closed
            refused = await two.client.get(path, headers=bearer(alice))
            assert refused.status_code == 401
            # Bob signs out of the console on the first process: his session's stream ends, his token's not.
            page = await console.get("/console/runs")
            cookie = {"Cookie": f"{sessions.COOKIE}={console.cookies[sessions.COOKIE]}"}
            signing_out = time.monotonic()
            out = await one.client.post("/console/logout", data={"csrf": csrf_of(page)}, headers=cookie)
            assert out.status_code == 303, out.text
            await by_session.closed(2.0)
            signed_out = time.monotonic() - signing_out
            assert by_session.stream.comments[-1] == f"the stream ended: {follows.SIGNED_OUT}"
            assert (await console.get(f"/v1/runs/{bobs}/events")).status_code == 401
            await asyncio.sleep(0.5)
            assert not bobs_token.stream.closed
        print(f"revoked: its stream ended {took:.3f} s later; signed out: {signed_out:.3f} s later")


async def test_ends_the_listener_did_not_hear_are_found_by_the_credential_look(
    db_url: str, tmp_path: Path, proxy: TcpProxy
) -> None:
    """A token revoked, a session signed out and a session expired while the second process's listener is
    down: their streams there end at its next look at the credentials (every second while deaf), and a
    stream of a credential that still holds stays open."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with site(db_url, tmp_path / "one") as one, site(db_url, tmp_path / "two", lead=False) as two:
        watch = two.h.engine.deps.gate_watch
        await watch.stop()
        watch.url = proxy.url(db_url)
        watch.start()
        await eventually(lambda: _is(watch.connected), what="the listener connected through the relay")
        admin = await one.h.token("root", "admin")
        names = ("alice", "bob", "carol", "dan")
        made = {name: await one.h.token(name, "caller") for name in names}
        runs = {name: await one.run_waiting(made[name], "asker") for name in names}
        async with (
            two.sign_in(made["bob"]) as bobs,
            two.sign_in(made["carol"]) as carols,
            opened(two.client, f"/v1/runs/{runs['alice']}/events", **bearer(made["alice"])) as alice,
            opened(bobs, f"/v1/runs/{runs['bob']}/events") as bob,
            opened(carols, f"/v1/runs/{runs['carol']}/events") as carol,
            opened(two.client, f"/v1/runs/{runs['dan']}/events", **bearer(made["dan"])) as dan,
        ):
            for reader in (alice, bob, carol, dan):
                await reader.until("the run's status told", lambda st: st.events)
            proxy.pause()  # the listener cannot come back
            assert proxy.cut() >= 1
            await eventually(lambda: _is(not watch.connected), what="the listener lost")
            ended_at = time.monotonic()
            assert (await one.client.delete("/v1/tokens/alice", headers=bearer(admin))).status_code == 200
            page = await bobs.get("/console/runs")
            cookie = {"Cookie": f"{sessions.COOKIE}={bobs.cookies[sessions.COOKIE]}"}
            out = await one.client.post("/console/logout", data={"csrf": csrf_of(page)}, headers=cookie)
            assert out.status_code == 303, out.text
            expired = await read_rows(
                db_url, "UPDATE console_sessions SET created_at = now() - interval '2 s', expires_at = now() "
                "WHERE token_name = 'carol' RETURNING id_hash"
            )  # fmt: skip
            assert len(expired) == 1
            for reader, why in ((alice, follows.REVOKED), (bob, follows.SIGNED_OUT), (carol, follows.SIGNED_OUT)):
                await reader.closed(follows.UNHEARD_CHECK_S + 4)
                assert reader.stream.comments[-1] == f"the stream ended: {why}"
            took = time.monotonic() - ended_at
            assert not watch.connected  # found by the look, not heard when the listener came back
            await asyncio.sleep(follows.UNHEARD_CHECK_S + 0.5)  # another look: dan's token still holds
            assert not dan.stream.closed
            proxy.resume()
        print(f"ends unheard: their streams ended within {took:.3f} s")


async def test_one_feed_reads_a_run_once_for_all_its_streams_and_does_not_poll_a_waiting_run(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        alice = await s.h.token("alice", "caller")
        run_id = await s.run_waiting(alice, "asker")
        feed = s.h.process.views.feed
        async with AsyncExitStack() as held:
            readers = [
                await held.enter_async_context(opened(s.client, f"/v1/runs/{run_id}/events", **bearer(alice)))
                for _ in range(8)
            ]
            for reader in readers:
                await reader.until("the run told", lambda st: st.events)
            looks, reads = feed.looks, feed.reads
            await asyncio.sleep(3.0)  # a waiting run: looked at every 5 s at most, never every half second
            assert (feed.looks - looks, feed.reads - reads) in ((0, 0), (1, 0))
            assert reads <= 2  # one read for the eight streams (two when one came in as it was read)
            await give_input(s, alice, run_id, "production")
            for reader in readers:
                await reader.until("the end told", lambda st: st.events and st.events[-1][0] == "end")
            # Each change read once for all eight: eight streams reading on their own read eight times a change.
            assert feed.reads - reads < 8
            ends = {r.stream.events[-1][2] for r in readers}
            assert len(ends) == 1  # all eight were told the same, to the same last id
        await eventually(lambda: _is(feed.watched() == 0), 10, "the feed forgot the run")


async def test_a_sign_out_is_told_on_ticketiq_sessions_with_the_sessions_hash_once_it_commits(
    db_url: str, tmp_path: Path
) -> None:
    """What every process hears of a sign-out (the streams it opened end there): the session id's hash on
    `ticketiq_sessions`, from the statement that deletes it, heard by a listener of its own."""
    async with site(db_url, tmp_path) as s:
        bob = await s.h.token("bob", "caller")
        async with (
            await psycopg.AsyncConnection.connect(db_url, autocommit=True) as listener,
            s.sign_in(bob) as console,
        ):
            await listener.execute("LISTEN ticketiq_sessions")
            session_id = console.cookies[sessions.COOKIE]
            page = await console.get("/console/runs")
            out = await console.post("/console/logout", data={"csrf": csrf_of(page)})
            assert out.status_code == 303, out.text
            heard = []
            async with asyncio.timeout(10):
                async for note in listener.notifies():
                    heard.append((note.channel, note.payload))
                    break
        assert heard == [("ticketiq_sessions", sessions.id_hash(session_id))]


async def test_a_long_wait_takes_a_slot_of_the_same_cap_and_ends_when_its_token_is_revoked(
    db_url: str, tmp_path: Path
) -> None:
    """What a long wait on a run (`GET /v1/runs/{id}?wait=S`, a later issue) is given: a slot of the
    streams' caps (`Follows.slot`), and a wait (`RunViews.wait_change`) that ends when the slot's token is
    revoked, whatever the run does."""
    async with site(db_url, tmp_path, max_streams_per_principal=1) as s:
        alice = await s.h.token("alice", "caller")
        admin = await s.h.token("root", "admin")
        run_id = await s.run_waiting(alice, "asker")
        process = s.h.process
        async with process.follows.slot(follows.Credential("alice"), "wait", 60.0) as slot:
            waiting = asyncio.create_task(process.views.wait_change(run_id, 60.0, until=slot))
            refused = await s.client.get(f"/v1/runs/{run_id}/events", headers=bearer(alice))
            assert refused.status_code == 429  # the wait holds alice's one slot
            await asyncio.sleep(0.3)
            assert not waiting.done()
            revoked_at = time.monotonic()
            assert (await s.client.delete("/v1/tokens/alice", headers=bearer(admin))).status_code == 200
            async with asyncio.timeout(2.0):
                now = await waiting
            took = time.monotonic() - revoked_at
        assert now is not None and now.status == "waiting"  # the run did nothing: the wait ended with its token
        assert slot.why == follows.REVOKED and len(process.follows) == 0
        print(f"revoked: the wait ended {took:.3f} s later")
