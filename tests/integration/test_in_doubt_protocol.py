"""The in-doubt protocol's core cases (I2, I3, I9, I14), each run against its three users through the one
driver (engine/in_doubt.py): an agent run's tool call, a workflow's tool step, and the fine-tune's
upload. Two app processes in the test's event loop over the real Postgres; the vendors (Jira, Discord,
OpenAI) are the stand-ins on real sockets, whose write log says what reached them. A process "dies" as a
SIGKILL leaves it: the server ends its liveness connection, it loses every lease at once, and the
leader hands what it held to a live process, which settles the write it left in doubt.

- Held at the vendor when its process died, applied there later: read back only once it can no longer
  be in flight (on the database clock), found there, never sent again.
- Not taken by the vendor (a 429), its process dead before it tried again: absent once it can no
  longer be in flight, so sent once more, under the same key.
- No way to tell (a write without a reader; for the fine-tune, a look-up that cannot answer): never
  sent again.
- A takeover committed while the settling process waits the write out: that zombie sends nothing more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import psycopg
import pytest
import yaml

from tests.support.crash import eventually
from tests.support.engine import kill_liveness, read_rows
from tests.support.fence_rig import take_job, take_run
from tests.support.http import TLS, serving
from tests.support.standins import Standins, serve_standins
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.process import AppProcess
from ticketiq.settings import Settings
from ticketiq.storage.token_store import TokenStore

# A write can be in flight for 3 s after its mark; a held request lands 1.5 s after it reached the vendor.
BUDGET_S, STALL_S, RETRY_AFTER_S = 3.0, 1.5, 2.0
# The zombie case's window: long enough that the settling process is still waiting the write out when the
# test takes the run over, however loaded the machine (with 3 s, the window ran out first once, and the
# settler rightly sent the write before the takeover).
HELD_BUDGET_S = 15.0
ISSUE = "OPS-1417"
WORKFLOWS = {
    "comment": {"owner": "ops-bot", "tenant": "acme", "steps": [
        {"id": "comment", "tool": "jira_add_comment", "args": {"issue_key": "{{ input.issue }}", "body": "Looked at"}},
    ]},
    "announce": {"owner": "ops-bot", "tenant": "acme", "steps": [
        {"id": "announce", "tool": "discord_send_message", "args": {"channel_id": "ops", "content": "Looked at"}},
    ]},
}  # fmt: skip
EXAMPLES = [
    {"messages": [{"role": "user", "content": f"Refund for order {n}?"}, {"role": "assistant", "content": "billing"}]}
    for n in range(10)
]


@pytest.fixture
async def standins(db_url: str) -> AsyncIterator[Standins]:
    async with serve_standins(db_url) as running:
        await running.options(fine_tune_duration_s=0.2)
        yield running


@dataclass
class Rig:
    """Two app processes on the stand-ins (one leads), and a caller's token for the API."""

    db_url: str
    standins: Standins
    processes: list[AppProcess]
    api: httpx.AsyncClient

    @property
    def first(self) -> AppProcess:
        return self.processes[0]

    async def died(self, holder: str) -> None:
        await kill_liveness(self.db_url, holder)


@asynccontextmanager
async def rig(db_url: str, tmp_path: Path, standins: Standins, budget_s: float = BUDGET_S) -> AsyncIterator[Rig]:
    spec = yaml.safe_load(Settings().agents.read_text())
    spec["workflows"] = WORKFLOWS
    agents = tmp_path / "agents.yaml"
    agents.write_text(yaml.safe_dump(spec))
    async with AsyncExitStack() as stack:
        processes = []
        for name, lead in (("a", False), ("b", True)):
            home = tmp_path / name
            home.mkdir()
            settings = standins.settings(home=home, agents=agents, seal_keys="t:in-doubt-secret", lead=lead,
                                         write_budget_s=budget_s, call_concurrency=1)  # fmt: skip
            process = await AppProcess.start(settings)
            stack.push_async_callback(process.stop)
            processes.append(process)
        token = tokens.mint()
        assert await TokenStore(processes[0].db).create("ops", "operator", None, tokens.token_hash(token), "test")
        base = await stack.enter_async_context(serving(create_app(processes[0].settings, processes[0])))
        client = httpx.AsyncClient(verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"})
        api = await stack.enter_async_context(client)
        yield Rig(db_url, standins, processes, api)


# ----- the three users of the protocol ---------------------------------------------------------------


class User(Protocol):
    """One user of the in-doubt protocol, driven end to end."""

    lease: str  # its lease's prefix
    writes: dict[bool, tuple[str, str]]  # (vendor, operation) of the write in doubt: with a reader, without
    unknown_ends: str  # how it ends when a write's outcome cannot be told
    records_settlement: bool  # whether it records how a write in doubt was settled (I8)

    async def start(self, rig: Rig, readable: bool) -> str: ...

    async def holder(self, rig: Rig, of: str) -> str:
        rows = await read_rows(rig.db_url, "SELECT holder FROM leases WHERE name = %s", f"{self.lease}{of}")
        return str(rows[0]["holder"])

    async def attempt(self, rig: Rig, of: str) -> int: ...

    async def ended(self, rig: Rig, of: str) -> str: ...

    async def settled(self, rig: Rig, of: str) -> str | None:
        """How the write left in doubt was settled, where its user records it (I8)."""
        return None

    async def read_back_after_window(self, rig: Rig, of: str) -> bool:
        """I14, on the database clock: nothing settled the write before it could no longer be in flight."""
        ...

    async def take_over(self, rig: Rig, of: str) -> None: ...

    def driven(self, rig: Rig, of: str) -> bool:
        """Whether a process of the rig still drives it."""
        ...


class AgentCalls(User):
    lease = "checkpoint:"
    records_settlement = True
    writes = {True: ("jira", "add_comment"), False: ("discord", "send_message")}
    unknown_ends = "succeeded"  # the model is told the outcome is unknown, and the run goes on

    async def start(self, rig: Rig, readable: bool) -> str:
        agent = rig.first.engine.deps.catalog.get("triage" if readable else "writer")
        assert agent is not None
        created = await rig.first.engine.create_run(agent, f"Look at {ISSUE}: checkout fails")
        assert await rig.first.engine.start(created.id)
        return str(created.id)

    async def attempt(self, rig: Rig, of: str) -> int:
        rows = await read_rows(rig.db_url, "SELECT attempt FROM checkpoints WHERE run_id = %s", of)
        return int(rows[0]["attempt"])

    async def ended(self, rig: Rig, of: str) -> str:
        async def done() -> bool:
            rows = await read_rows(rig.db_url, "SELECT status FROM runs WHERE id = %s", of)
            return rows[0]["status"] in ("succeeded", "failed", "stopped", "interrupted")

        await eventually(done, 90, f"run {of} ending")
        return str((await read_rows(rig.db_url, "SELECT status FROM runs WHERE id = %s", of))[0]["status"])

    async def settled(self, rig: Rig, of: str) -> str | None:
        rows = await read_rows(
            rig.db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", of
        )
        assert len(rows) == 1, rows
        tools = {"jira_add_comment", "discord_send_message"}
        return next(str(c["happened"]) for c in rows[0]["detail"]["calls"] if c["tool"] in tools)

    async def read_back_after_window(self, rig: Rig, of: str) -> bool:
        rows = await read_rows(rig.db_url, "SELECT updated_at >= in_flight_until AS after FROM calls "
                                           "WHERE run_id = %s AND tool = 'jira_add_comment'", of)  # fmt: skip
        return bool(rows[0]["after"])

    async def take_over(self, rig: Rig, of: str) -> None:
        await took(rig.db_url, of, "run")

    def driven(self, rig: Rig, of: str) -> bool:
        return any(not task.done() for p in rig.processes if (task := p.engine.tasks.get(of)) is not None)


class JobUser(User):
    lease = "job:"
    records_settlement: bool

    async def attempt(self, rig: Rig, of: str) -> int:
        return int((await read_rows(rig.db_url, "SELECT attempt FROM jobs WHERE id = %s", of))[0]["attempt"])

    async def ended(self, rig: Rig, of: str) -> str:
        async def done() -> bool:
            rows = await read_rows(rig.db_url, "SELECT status FROM jobs WHERE id = %s", of)
            return rows[0]["status"] in ("succeeded", "failed", "cancelled", "interrupted")

        await eventually(done, 90, f"job {of} ending")
        return str((await read_rows(rig.db_url, "SELECT status FROM jobs WHERE id = %s", of))[0]["status"])

    async def take_over(self, rig: Rig, of: str) -> None:
        await took(rig.db_url, of, "job")

    def driven(self, rig: Rig, of: str) -> bool:
        return any(of in p.jobs.slots for p in rig.processes)


class WorkflowSteps(JobUser):
    records_settlement = True
    writes = {True: ("jira", "add_comment"), False: ("discord", "send_message")}
    unknown_ends = "failed"  # "outcome unknown, not sent again": a workflow never goes on past it

    async def start(self, rig: Rig, readable: bool) -> str:
        name = "comment" if readable else "announce"
        made = await rig.api.post(f"/v1/workflows/{name}/runs", json={"input": {"issue": ISSUE}})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    async def settled(self, rig: Rig, of: str) -> str | None:
        rows = await read_rows(rig.db_url, "SELECT settled FROM workflow_steps WHERE job_id = %s", of)
        assert len(rows) == 1, rows
        return None if rows[0]["settled"] is None else str(rows[0]["settled"])

    async def read_back_after_window(self, rig: Rig, of: str) -> bool:
        rows = await read_rows(
            rig.db_url, "SELECT ended_at >= in_flight_until AS after FROM workflow_steps WHERE job_id = %s", of
        )
        return bool(rows[0]["after"])


class FineTunes(JobUser):
    # The upload is read back by the file's name; it always has a reader. Without one to answer, the
    # look-up that cannot answer stands in: the outcome cannot be told either way.
    writes = {True: ("openai", "upload_file"), False: ("openai", "upload_file")}
    unknown_ends = "failed"
    records_settlement = False  # what it settled shows in what it made: the job's file and remote job

    def __init__(self) -> None:
        self.marks: dict[str, str] = {}  # job -> when its upload could no longer be in flight

    async def start(self, rig: Rig, readable: bool) -> str:
        if not readable:  # every look at the files is answered 500, for longer than the job retries
            await rig.standins.fault("openai", "500", operation="list_files", count=100)
        params = {"model": "gpt-4o-mini-2024-07-18", "training": {"examples": EXAMPLES}, "poll_s": 0.05}
        made = await rig.api.post("/v1/jobs", json={"kind": "fine_tune", "params": params})
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    async def holder(self, rig: Rig, of: str) -> str:
        # The mark as the dying attempt left it: when the upload can no longer be in flight.
        state = (await read_rows(rig.db_url, "SELECT state FROM jobs WHERE id = %s", of))[0]["state"]
        self.marks[of] = state["upload"]["in_flight_until"]
        return await super().holder(rig, of)

    async def read_back_after_window(self, rig: Rig, of: str) -> bool:
        # The create follows the upload's settlement: it reached the vendor only after the look-up.
        rows = await read_rows(
            rig.db_url, "SELECT received_at >= %s::timestamptz AS after, received_at, effect, key, client "
            "FROM standin.writes WHERE operation = 'create_fine_tuning_job'", self.marks[of],
        )  # fmt: skip
        # Said whole when it fails (once, in a make test on a loaded machine): a create too early, or two.
        assert [r["after"] for r in rows] == [True], f"creates against the upload's window {self.marks[of]}: {rows}"
        return True


USERS = [pytest.param(AgentCalls, id="agent-call"), pytest.param(WorkflowSteps, id="workflow-step"),
         pytest.param(FineTunes, id="fine-tune")]  # fmt: skip


async def took(db_url: str, of: str, kind: str) -> None:
    """Another process takes it over, committed: a new attempt and the lease, held for the test's length.
    The taker is a live process (a dead one's would be handed on by the sweep) that never drives it."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT id FROM processes WHERE ended_at IS NULL AND process_alive(id) LIMIT 1")
        live = await cur.fetchone()
        assert live is not None
        await (take_run if kind == "run" else take_job)(conn, of, str(live[0]))
        lease = ("checkpoint:" if kind == "run" else "job:") + of
        await conn.execute("UPDATE leases SET expires_at = now() + interval '10 minutes' WHERE name = %s", (lease,))


async def writes_of(rig: Rig, user: User, readable: bool) -> list[dict[str, Any]]:
    vendor, operation = user.writes[readable]
    return await rig.standins.writes(vendor=vendor, operation=operation)


async def taken_by_vendor(standins: Standins, mode: str) -> None:
    """The stand-in took its fault of `mode`: the request reached it (and, stalled, is held there)."""

    async def taken() -> bool:
        return not any(f["mode"] == mode for f in (await standins.admin.get("/_standin/faults")).json())

    await eventually(taken, 60, "the request reaching the stand-in")


async def refused_once(rig: Rig, user: User) -> list[dict[str, Any]]:
    """The vendor answered the first try 429 (not taken, retry after 2 s): the write is in doubt."""

    async def refused() -> bool:
        return [w["effect"] for w in await writes_of(rig, user, True)] == ["refused"]

    await eventually(refused, 60, "the first try refused")
    return await writes_of(rig, user, True)


# ----- the cases ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("user_of", USERS)
async def test_a_write_in_flight_when_its_process_died_is_read_back_after_its_window_found_and_not_sent_again(
    db_url: str, tmp_path: Path, standins: Standins, user_of: type[User]
) -> None:
    user = user_of()
    vendor, operation = user.writes[True]
    await standins.fault(vendor, "stall", stall_s=STALL_S, operation=operation)
    async with rig(db_url, tmp_path, standins) as r:
        of = await user.start(r, True)
        await taken_by_vendor(standins, "stall")
        await r.died(await user.holder(r, of))  # its request stays with the vendor, which applies it later
        assert await user.ended(r, of) == "succeeded"
        writes = await writes_of(r, user, True)
        assert [w["effect"] for w in writes] == ["applied"]  # found, never sent again
        assert await user.attempt(r, of) >= 2
        assert await user.settled(r, of) == ("found" if user.records_settlement else None)
        assert await user.read_back_after_window(r, of)  # I14: not before it could no longer be in flight


@pytest.mark.parametrize("user_of", USERS)
async def test_a_write_absent_once_it_can_no_longer_be_in_flight_is_sent_once_more_under_the_same_key(
    db_url: str, tmp_path: Path, standins: Standins, user_of: type[User]
) -> None:
    user = user_of()
    vendor, operation = user.writes[True]
    await standins.fault(vendor, "429", retry_after_s=RETRY_AFTER_S, operation=operation)
    async with rig(db_url, tmp_path, standins) as r:
        of = await user.start(r, True)
        first = await refused_once(r, user)
        await r.died(await user.holder(r, of))  # before it tried again: nothing of it reached the vendor
        assert await user.ended(r, of) == "succeeded"
        writes = await writes_of(r, user, True)
    assert [w["effect"] for w in writes] == ["refused", "applied"]  # sent once more, and only once
    assert first[0]["key"] is not None and writes[1]["key"] == first[0]["key"]
    assert await user.settled(r, of) == ("sent_once" if user.records_settlement else None)


@pytest.mark.parametrize("user_of", USERS)
async def test_a_write_whose_outcome_cannot_be_told_is_never_sent_again(
    db_url: str, tmp_path: Path, standins: Standins, user_of: type[User]
) -> None:
    user = user_of()
    vendor, operation = user.writes[False]
    await standins.fault(vendor, "stall", stall_s=STALL_S, operation=operation)
    async with rig(db_url, tmp_path, standins) as r:
        of = await user.start(r, False)
        await taken_by_vendor(standins, "stall")
        await r.died(await user.holder(r, of))
        assert await user.ended(r, of) == user.unknown_ends

        async def landed() -> bool:  # the held request lands; nothing follows it
            return len(await writes_of(r, user, False)) >= 1

        await eventually(landed, 30, "the held write landing")
        assert await user.attempt(r, of) >= 2
        writes = await writes_of(r, user, False)
    assert [w["effect"] for w in writes] == ["applied"]  # the dead attempt's, never sent again
    assert await user.settled(r, of) == ("unknown_not_sent" if user.records_settlement else None)


@pytest.mark.parametrize("user_of", USERS)
async def test_a_zombie_taken_over_while_it_waits_out_a_write_sends_nothing_after_the_takeover(
    db_url: str, tmp_path: Path, standins: Standins, user_of: type[User]
) -> None:
    user = user_of()
    vendor, operation = user.writes[True]
    await standins.fault(vendor, "429", retry_after_s=RETRY_AFTER_S, operation=operation)
    async with rig(db_url, tmp_path, standins, budget_s=HELD_BUDGET_S) as r:
        of = await user.start(r, True)
        await refused_once(r, user)
        await r.died(await user.holder(r, of))

        async def settling() -> bool:  # a live process took it on: it waits the write out (I14)
            return await user.attempt(r, of) >= 2 and user.driven(r, of)

        await eventually(settling, 60, "a live process settling the write")
        await user.take_over(r, of)
        at_takeover = len(await writes_of(r, user, True))

        async def stopped() -> bool:
            return not user.driven(r, of)

        await eventually(stopped, 60, "the zombie stopping")  # ended: it sends nothing any more
        writes = await writes_of(r, user, True)
    assert writes[at_takeover:] == []  # nothing at all after the takeover committed
    assert [w["effect"] for w in writes] == ["refused"]
