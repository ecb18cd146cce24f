"""A remote A2A agent as a tool (I2, I9, I14): the task id is recorded the moment the agent names it; a
call left in doubt is read back by GetTask with it (waiting while the task works), else settled unknown,
and never sent again. Real stand-ins (the sdk's own server on Postgres) over real sockets; a process
"dies" in this one, its driver stopped where it is, as a SIGKILL at the engine's fault points leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.crash import eventually, kill_driver, lapse
from tests.support.engine import read_rows
from tests.support.http import TLS
from tests.support.standins import Standins, serve_standins
from ticketiq.errors import Fenced, LeaseLost
from ticketiq.leader.sweep import Sweeper
from ticketiq.process import AppProcess
from ticketiq.runtime.faults import Faults
from ticketiq.tools.base import CallContext, Outcome, ReadBack, SendWindow
from ticketiq.tools.registry import build_registry

SENDS = {"vendor": "a2a_agent", "operation": "send_message"}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(verify=TLS) as client:
        yield client


# ----- the tool against the stand-in ------------------------------------------------------------------


class Remote:
    """The registered tool, called the way the engine calls it; the references it recorded."""

    def __init__(self, standins: Standins, http: httpx.AsyncClient, **overrides: Any) -> None:
        self.settings = standins.settings(**overrides)
        tool = build_registry(self.settings).get("ask_remote_agent")
        assert tool is not None and tool.reader is not None
        self.tool = tool
        self.http = http
        self.recorded: list[str] = []

    def ctx(self, key: str, text: str, **fields: Any) -> CallContext:
        async def record(ref: str) -> None:
            self.recorded.append(ref)

        fields.setdefault("on_reference", record)
        return CallContext("run-1", "ask_remote_agent", {"text": text}, key, self.http, self.settings, **fields)

    async def ask(self, key: str, text: str, budget_s: float = 10.0, **fields: Any) -> Outcome:
        now = time.monotonic()
        window = SendWindow(budget_ends=now + budget_s, lease_deadline=now + 60)
        return await self.tool.executor(self.ctx(key, text, window=window, **fields))

    async def read(self, task_id: str | None) -> ReadBack:
        assert self.tool.reader is not None
        return await self.tool.reader(self.ctx("k", "anything", reference=task_id, on_reference=None))


async def test_a_message_is_answered_through_a_task_whose_id_is_recorded_at_once(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    remote = Remote(standins, http)
    outcome = await remote.ask("tqkey-1", "is OPS-1 safe to close?")
    assert outcome.ok, outcome
    assert outcome.result["answer"] == "remote answer to: is OPS-1 safe to close?"
    sends = await standins.writes(**SENDS)
    assert [(s["key"], s["ref"]) for s in sends] == [("tqkey-1", outcome.result["task_id"])]  # our key, once
    assert remote.recorded == [outcome.result["task_id"]]
    # The sdk's protocol header rode on this call's requests, not into the shared client's defaults.
    assert "a2a-version" not in http.headers


async def test_the_reader_finds_a_task_by_its_id_waiting_while_it_works(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    # The task works 3 s; each send's budget and the follow's bound are well short of that and well past
    # what the send itself takes, even on a loaded machine.
    await standins.options(a2a_agent_work_ms=3000)
    # The write's window bounds the send only: once the task is known the call follows it past the
    # window (reads), up to TICKETIQ_REMOTE_AGENT_WAIT_S.
    followed = await Remote(standins, http).ask("tqkey-2b", "slow question", budget_s=1.2)
    assert followed.ok and followed.result["answer"] == "remote answer to: slow question"
    remote = Remote(standins, http, remote_agent_wait_s=1.2)
    # Past that bound the call ends without its answer, not sent again.
    cut_short = await remote.ask("tqkey-2", "slow question", budget_s=1.2)
    assert not cut_short.ok and not cut_short.uncertain
    assert "still working" in str(cut_short.error)
    [task_id] = remote.recorded
    assert await standin_task_state(standins, task_id) == "TASK_STATE_WORKING"
    found = await Remote(standins, http).read(task_id)  # waits until the task completed
    assert found.found is True and found.outcome is not None and found.outcome.ok
    assert found.outcome.result == {"answer": "remote answer to: slow question", "task_id": task_id}
    assert (await remote.read("no-such-task")).found is False
    assert (await remote.read(None)).found is None
    assert len(await standins.writes(**SENDS)) == 2  # one send each for the two calls; reading sends nothing


async def test_the_reader_cannot_tell_while_the_task_works_past_its_bound(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    await standins.options(a2a_agent_work_ms=5000)
    sender = Remote(standins, http, remote_agent_wait_s=0.3)
    await sender.ask("tqkey-3", "very slow", budget_s=0.3)
    [task_id] = sender.recorded
    started = time.monotonic()
    found = await Remote(standins, http, remote_agent_wait_s=0.8).read(task_id)
    assert found.found is None  # still working at the bound: cannot tell (settled unknown, never resent)
    assert time.monotonic() - started < 3.0


async def test_a_failed_remote_task_is_the_calls_error_and_is_found_as_such(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    remote = Remote(standins, http)
    outcome = await remote.ask("tqkey-4", "fail this one")
    assert not outcome.ok and not outcome.uncertain
    assert "failed: the remote agent could not answer: fail this one" in str(outcome.error)
    found = await remote.read(remote.recorded[0])
    assert found.found is True and found.outcome is not None and not found.outcome.ok


async def test_the_remote_agents_tasks_survive_a_restart_of_the_stand_in(db_url: str, http: httpx.AsyncClient) -> None:
    async with serve_standins(db_url) as first:
        remote = Remote(first, http)
        assert (await remote.ask("tqkey-5", "remember me")).ok
    async with serve_standins(db_url) as again:
        found = await Remote(again, http).read(remote.recorded[0])
    assert found.found is True and found.outcome is not None
    assert found.outcome.result["answer"] == "remote answer to: remember me"


async def test_no_message_leaves_once_the_lease_is_lost(standins: Standins, http: httpx.AsyncClient) -> None:
    checks = 0

    def before_send() -> None:
        nonlocal checks
        checks += 1
        if checks > 2:  # the card was read (an explicit check, then the last moment); then the lease is gone
            raise LeaseLost("run-1", "taken over")

    with pytest.raises(LeaseLost):
        await Remote(standins, http).ask("tqkey-6", "never sent", before_send=before_send)
    assert await standins.writes(**SENDS) == []


async def standin_task_state(standins: Standins, task_id: str) -> str:
    rows = await read_rows(standins.settings_env["TICKETIQ_DATABASE_URL"],
                           "SELECT state FROM standin.a2a_tasks WHERE id = %s", task_id)  # fmt: skip
    return str(rows[0]["state"])


# ----- the engine: a run of the consultant, lost and resumed in this process ----------------------


class DiesAt(Faults):
    """The engine's fault point in this process: there the driver stops where it is, as the SIGKILL the
    point stands for leaves the run, while the test's process lives on."""

    def hit(self, point: str) -> None:
        if point == self.point:
            self.point = None
            raise asyncio.CancelledError


@contextlib.asynccontextmanager
async def app_process(standins: Standins, home: Path, **overrides: Any) -> AsyncIterator[AppProcess]:
    settings = standins.settings(home=home, seal_keys="t:remote-agent-secret", lead=False, **overrides)
    process = await AppProcess.start(settings)
    try:
        yield process
    finally:
        await process.stop()


async def consult(process: AppProcess, text: str = "Is OPS-42 safe to close?") -> str:
    agent = process.engine.deps.catalog.get("consultant")
    assert agent is not None
    created = await process.engine.create_run(agent, text)
    assert await process.engine.start(created.id)
    return created.id


async def call_row(db_url: str, run_id: str) -> dict[str, Any]:
    rows = await read_rows(
        db_url,
        "SELECT step, idx, attempt, status, settlement, remote_ref, outcome FROM calls "
        "WHERE run_id = %s AND tool = 'ask_remote_agent'",
        run_id,
    )
    assert len(rows) == 1, rows
    return rows[0]


def in_doubt(db_url: str, run_id: str, with_ref: bool) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rows = await read_rows(
            db_url,
            "SELECT remote_ref FROM calls WHERE run_id = %s AND tool = 'ask_remote_agent' AND status = 'in_doubt'",
            run_id,
        )
        return bool(rows) and (rows[0]["remote_ref"] is not None) == with_ref

    return check


async def stopped(task: asyncio.Task[str]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def resume(process: AppProcess, db_url: str, run_id: str) -> str:
    """The lost run's lease lapses; a sweep claims it here and the resumed run goes to its end."""
    await lapse(db_url, run_id)
    assert await Sweeper(process.engine, db_url).claim("lapsed") == 1
    return await asyncio.wait_for(process.engine.tasks[run_id], 60)


async def settled_as(db_url: str, run_id: str) -> str:
    rows = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    assert len(rows) == 1, rows
    return str({c["tool"]: c["happened"] for c in rows[0]["detail"]["calls"]}["ask_remote_agent"])


async def answer_of(db_url: str, run_id: str) -> str:
    return str((await read_rows(db_url, "SELECT answer FROM runs WHERE id = %s", run_id))[0]["answer"])


async def test_a_run_asks_the_remote_agent_and_records_the_task_id(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(standins, tmp_path) as p:
        run_id = await consult(p)
        assert await asyncio.wait_for(p.engine.tasks[run_id], 60) == "succeeded"
    assert await answer_of(db_url, run_id) == "The remote agent answered: remote answer to: Is OPS-42 safe to close?"
    [sent] = await standins.writes(**SENDS)
    row = await call_row(db_url, run_id)
    assert (row["status"], row["remote_ref"]) == ("done", sent["ref"])  # the id the agent gave, kept
    assert row["outcome"]["result"]["task_id"] == sent["ref"]


async def test_a_call_in_doubt_while_its_remote_task_works_is_read_back_by_its_id_not_sent_again(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    await standins.options(a2a_agent_work_ms=3000)
    async with app_process(standins, tmp_path) as p:
        run_id = await consult(p)
        await eventually(in_doubt(db_url, run_id, with_ref=True))
        await kill_driver(p.engine, run_id)  # its task id recorded, the remote task still working
        row = await call_row(db_url, run_id)
        assert await standin_task_state(standins, row["remote_ref"]) == "TASK_STATE_WORKING"
        claimed = time.monotonic()
        assert await resume(p, db_url, run_id) == "succeeded"
        # No I14 wait: the id proves where the call is; GetTask waited out the work, no longer.
        assert time.monotonic() - claimed < 8.0
    assert await settled_as(db_url, run_id) == "found"
    assert "remote answer to: Is OPS-42" in await answer_of(db_url, run_id)
    assert len(await standins.writes(**SENDS)) == 1  # never sent again
    assert (await call_row(db_url, run_id))["settlement"] == "found"


async def test_a_call_whose_answer_came_back_but_was_not_recorded_is_found_by_its_task_id(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(standins, tmp_path) as p:
        p.engine.deps.faults = DiesAt("after_send")
        run_id = await consult(p)
        await stopped(p.engine.tasks[run_id])
        assert (await call_row(db_url, run_id))["status"] == "in_doubt"
        assert await resume(p, db_url, run_id) == "succeeded"
    assert await settled_as(db_url, run_id) == "found"
    assert len(await standins.writes(**SENDS)) == 1


async def test_a_call_in_doubt_before_it_was_sent_is_settled_unknown_and_never_sent(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(standins, tmp_path) as p:
        p.engine.deps.faults = DiesAt("after_mark")
        run_id = await consult(p)
        await stopped(p.engine.tasks[run_id])
        assert await resume(p, db_url, run_id) == "succeeded"
    assert await settled_as(db_url, run_id) == "unknown_not_sent"
    assert await standins.writes(**SENDS) == []
    row = await call_row(db_url, run_id)
    assert (row["settlement"], row["remote_ref"]) == ("unknown_not_sent", None)
    unknown = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.call.settled_unknown'", run_id
    )
    assert [u["detail"]["tool"] for u in unknown] == ["ask_remote_agent"]
    assert await answer_of(db_url, run_id) == "The remote agent answered: no answer came back"


async def test_a_message_sent_whose_task_id_never_came_back_is_unknown_and_not_sent_again(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    # The agent takes the message at once but names its task only 1.5 s later; the process dies meanwhile.
    await standins.options(a2a_agent_accept_ms=1500, a2a_agent_work_ms=0)
    async with app_process(standins, tmp_path) as p:
        run_id = await consult(p)

        async def received() -> bool:
            return len(await standins.writes(**SENDS)) == 1

        await eventually(received)
        assert await in_doubt(db_url, run_id, with_ref=False)()
        await kill_driver(p.engine, run_id)
        assert await resume(p, db_url, run_id) == "succeeded"
        [sent] = await standins.writes(**SENDS)

        async def done_remotely() -> bool:
            rows = await read_rows(db_url, "SELECT state FROM standin.a2a_tasks WHERE id = %s", sent["ref"])
            return bool(rows) and rows[0]["state"] == "TASK_STATE_COMPLETED"

        await eventually(done_remotely)  # the agent did answer it, to a sender long gone
    assert await settled_as(db_url, run_id) == "unknown_not_sent"
    assert len(await standins.writes(**SENDS)) == 1  # sent once, never again
    assert (await call_row(db_url, run_id))["remote_ref"] is None


async def test_recording_the_task_id_is_fenced_by_the_attempt_that_marked_the_call(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(standins, tmp_path) as p:
        p.engine.deps.faults = DiesAt("after_mark")
        run_id = await consult(p)
        await stopped(p.engine.tasks[run_id])
        row = await call_row(db_url, run_id)
        handle = p.engine.deps.store.bound(run_id, row["attempt"])
        await handle.record_reference(row["step"], row["idx"], "task-a")  # its own attempt, in doubt: kept
        async with await psycopg.AsyncConnection.connect(db_url) as takeover:
            # I3: a takeover raises the attempt while the statement waits on the checkpoint row.
            await takeover.execute("UPDATE checkpoints SET attempt = attempt + 1 WHERE run_id = %s", (run_id,))
            waiting = asyncio.create_task(handle.record_reference(row["step"], row["idx"], "task-b"))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await takeover.commit()
        with pytest.raises(Fenced):
            await waiting
        later = p.engine.deps.store.bound(run_id, row["attempt"] + 1)
        with pytest.raises(Fenced):  # the new attempt did not mark this call: nothing is recorded either
            await later.record_reference(row["step"], row["idx"], "task-c")
    assert (await call_row(db_url, run_id))["remote_ref"] == "task-a"


async def test_a_task_id_the_agent_does_not_know_is_settled_unknown_never_sent(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(standins, tmp_path) as p:
        p.engine.deps.faults = DiesAt("after_mark")
        run_id = await consult(p)
        await stopped(p.engine.tasks[run_id])
        row = await call_row(db_url, run_id)
        # As if the agent had named a task it then forgot: read back, not found, and still not sent.
        await p.engine.deps.store.bound(run_id, row["attempt"]).record_reference(row["step"], row["idx"], "forgotten")
        assert await resume(p, db_url, run_id) == "succeeded"
    assert await settled_as(db_url, run_id) == "unknown_not_sent"
    assert await standins.writes(**SENDS) == []
    outcome = (await call_row(db_url, run_id))["outcome"]
    assert "knows no task" in outcome["result"]["message"]
