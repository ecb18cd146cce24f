"""Cron triggers through the HTTP API over a real socket, and the leader's fire step with an injected
clock (issue 8): a schedule is made, listed and deleted; a due fire makes its run once and its outcome
is recorded once, by the run's hand-on, fenced by the attempt; two leaders fire a time once; a leader
that died mid-fire is replaced by one that makes the same run; the missed-fire policy both ways; a
failed run fails its fire with the reason; the agents file's schedules are seeded once.

The fire step is called directly with `now` set to a fire time, so no test waits for a minute to turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import psycopg
import pytest
import yaml

from tests.support.crash import eventually, kill_driver, lapse
from tests.support.engine import Harness, Probe, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.engine import run_keys
from ticketiq.entries.api import create_app
from ticketiq.errors import Fenced
from ticketiq.intake.scheduler import Scheduler
from ticketiq.process import AppProcess
from ticketiq.settings import Settings

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"helper": [READ, {"text": "answered {jira_key}"}]}
AGENTS: dict[str, dict[str, Any]] = {"helper": {"tools": ["probe_read"]}}
MINUTELY = {"agent": "helper", "cron": "* * * * *", "timezone": "UTC", "input": "Look at OPS-21"}


@asynccontextmanager
async def api(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    # lead=False: only the test fires, with its own clock.
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, lead=False, **kw) as h:
        token = await h.token("ops", "admin")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield client, h


async def make(client: httpx.AsyncClient, **body: str) -> dict[str, Any]:
    made = await client.post("/v1/schedules", json={**MINUTELY, **body})
    assert made.status_code == 201, made.text
    schedule: dict[str, Any] = made.json()
    return schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def fires(client: httpx.AsyncClient, schedule_id: str) -> list[dict[str, Any]]:
    listed = await client.get(f"/v1/schedules/{schedule_id}/fires")
    assert listed.status_code == 200, listed.text
    found: list[dict[str, Any]] = listed.json()["fires"]
    return found


async def ended(h: Harness, run_id: str) -> str:
    status = await h.engine.wait_terminal(run_id, 30)
    assert status is not None
    return str(status.status)


async def test_a_schedule_is_made_listed_and_deleted_and_bad_input_is_refused_naming_the_field(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        refused = [
            ({"cron": "* * * * * *"}, 422, ["body", "cron"]),
            ({"cron": "0 0 30 2 *"}, 422, ["body", "cron"]),
            ({"timezone": "Mars/Olympus"}, 422, ["body", "timezone"]),
            ({"agent": "nobody"}, 404, ["body", "agent"]),
            ({"input": ""}, 422, ["body", "input"]),
        ]
        for change, status, loc in refused:
            response = await client.post("/v1/schedules", json={**MINUTELY, **change})
            assert response.status_code == status, (change, response.text)
            assert response.json()["detail"][0]["loc"] == loc, change
        assert await read_rows(db_url, "SELECT 1 FROM schedules") == []

        key = {"Idempotency-Key": "schedule-1"}
        before = (await read_rows(db_url, "SELECT now() AS now"))[0]["now"]
        first = await client.post("/v1/schedules", json={**MINUTELY, "timezone": "Europe/Berlin"}, headers=key)
        again = await client.post("/v1/schedules", json={**MINUTELY, "timezone": "Europe/Berlin"}, headers=key)
        assert first.status_code == again.status_code == 201, first.text
        assert again.json() == first.json() and again.headers.get("Idempotent-Replayed") == "true"
        made = first.json()
        assert (made["agent"], made["cron"], made["timezone"], made["created_by"]) == (
            "helper", "* * * * *", "Europe/Berlin", "ops"
        )  # fmt: skip
        after = (await read_rows(db_url, "SELECT now() AS now"))[0]["now"]
        # The first time after its making, which lies between the two reads (a minute may turn between them).
        assert before < at(made["next_fire_at"]) <= after + timedelta(minutes=1)
        assert at(made["next_fire_at"]).second == 0

        operator = await h.token("watcher", "operator")
        as_operator = {"Authorization": f"Bearer {operator}"}
        listed = await client.get("/v1/schedules", headers=as_operator)
        assert [s["id"] for s in listed.json()["schedules"]] == [made["id"]]
        forbidden = await client.post("/v1/schedules", json=MINUTELY, headers=as_operator)
        assert forbidden.status_code == 403 and "admin" in forbidden.json()["detail"][0]["msg"]

        gone = await client.delete(f"/v1/schedules/{made['id']}")
        assert gone.status_code == 200 and gone.json()["id"] == made["id"]
        assert (await client.get("/v1/schedules")).json()["schedules"] == []
        assert (await client.delete(f"/v1/schedules/{made['id']}")).status_code == 404
        missing = await client.get(f"/v1/schedules/{made['id']}/fires")
        assert missing.status_code == 404 and missing.json()["detail"][0]["loc"] == ["path", "schedule_id"]
        # A deleted schedule fires no more, however late it is.
        assert await Scheduler(h.engine).fire_due(now=at(made["next_fire_at"]) + timedelta(hours=1)) == []
    audit = await read_rows(db_url, "SELECT action, actor FROM audit_log WHERE action LIKE 'schedule.%%' ORDER BY id")
    assert audit == [{"action": "schedule.created", "actor": "ops"}, {"action": "schedule.deleted", "actor": "ops"}]


async def test_a_due_schedule_fires_its_run_once_and_its_outcome_is_recorded_once(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, h):
        made = await make(client)
        due = at(made["next_fire_at"])
        scheduler = Scheduler(h.engine)
        assert await scheduler.fire_due(now=due - timedelta(seconds=1)) == []  # not yet
        runs = await scheduler.fire_due(now=due)
        assert len(runs) == 1
        assert await ended(h, runs[0]) == "succeeded"
        # The same time again, and a little later: nothing more is fired.
        assert await scheduler.fire_due(now=due) == []
        assert await scheduler.fire_due(now=due + timedelta(seconds=20)) == []
        listed = await fires(client, made["id"])
        run = (await client.get(f"/v1/runs/{runs[0]}")).json()
        schedule = (await client.get("/v1/schedules")).json()["schedules"][0]
    assert [(at(f["fire_at"]), f["run_id"], f["status"], f["outcome"], f["reason"]) for f in listed] == [
        (due, runs[0], "succeeded", "answered OPS-21", None)
    ]
    assert (run["channel"], run["may_wait"], run["created_by"], run["answer"]) == (
        "cron", False, "ops", "answered OPS-21"
    )  # fmt: skip
    assert at(schedule["next_fire_at"]) == due + timedelta(minutes=1)
    handed = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", runs[0]
    )
    assert [a["detail"]["fire_outcome"] for a in handed] == ["recorded"]
    rows = await read_rows(db_url, "SELECT outcome_attempt FROM schedule_fires")
    assert rows == [{"outcome_attempt": 1}]
    assert await read_rows(db_url, "SELECT count(*) AS n FROM runs") == [{"n": 1}]


async def test_two_leaders_firing_together_fire_each_time_once(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    async with (
        api(db_url, tmp_path / "one") as (client, one),
        engine_under_test(db_url, tmp_path / "two", SCRIPTS, AGENTS, lead=False) as two,
    ):
        made = [await make(client, input=f"Look at OPS-{30 + n}") for n in range(4)]
        due = max(at(m["next_fire_at"]) for m in made)
        first, second = Scheduler(one.engine), Scheduler(two.engine)
        for _ in range(3):  # the same time, again and again: still one fire each
            await asyncio.gather(first.fire_due(now=due), second.fire_due(now=due))
        rows = await read_rows(db_url, "SELECT schedule_id::text AS s, run_id::text AS r FROM schedule_fires")
        assert Counter(r["s"] for r in rows) == {m["id"]: 1 for m in made}
        runs = await read_rows(db_url, "SELECT id::text AS id FROM runs WHERE channel = 'cron'")
        assert {r["id"] for r in runs} == {r["r"] for r in rows} and len(runs) == 4
        for run in runs:
            await eventually(_succeeded(db_url, run["id"]), what="the fire's run ending")
        outcomes = await read_rows(db_url, "SELECT outcome FROM schedule_fires ORDER BY outcome")
    assert [o["outcome"] for o in outcomes] == [f"answered OPS-{30 + n}" for n in range(4)]
    assert len(one.asked) + len(two.asked) == 8  # two steps a run, each asked once


def _succeeded(db_url: str, run_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rows = await read_rows(db_url, "SELECT status FROM runs WHERE id = %s", run_id)
        return bool(rows) and rows[0]["status"] == "succeeded"

    return check


async def test_a_leader_that_died_mid_fire_is_replaced_by_one_that_makes_the_same_run_once(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        scheduler = Scheduler(h.engine)
        # Both fire at 03:00 UTC: every minute, a minute boundary passed between the two POSTs on a busy
        # machine gave the second schedule the next minute, and at `due` only the first was due.
        daily = "0 3 * * *"
        # Died after recording the fire, before making its run.
        early = await make(client, cron=daily, input="Look at OPS-41")
        due = at(early["next_fire_at"])
        key = run_keys.cron(early["id"], due)
        recorded = await scheduler.store.fire(early["id"], due + timedelta(minutes=1), due, key, False, None, "dead")
        assert recorded is not None
        # Died after making the run, before recording it on the fire.
        late = await make(client, cron=daily, input="Look at OPS-42")
        assert at(late["next_fire_at"]) == due
        late_key = run_keys.cron(late["id"], due)
        assert await scheduler.store.fire(late["id"], due + timedelta(minutes=1), due, late_key, False, None, "dead")
        helper = h.engine.deps.catalog.get("helper")
        orphan = await h.engine.create_run(helper, "Look at OPS-42", may_wait=False, channel="cron",
                                           idempotency_key=late_key, actor=f"schedule:{late['id']}",
                                           created_by="ops")  # fmt: skip

        runs = await scheduler.fire_due(now=due)
        assert len(runs) == 2 and orphan.id in runs  # the orphan found by its key, not made again
        for run_id in runs:
            assert await ended(h, run_id) == "succeeded"
        assert await scheduler.fire_due(now=due) == []  # each fire has its run now
        early_fires, late_fires = await fires(client, early["id"]), await fires(client, late["id"])
    assert [(f["status"], f["outcome"]) for f in early_fires] == [("succeeded", "answered OPS-41")]
    assert [(f["run_id"], f["outcome"]) for f in late_fires] == [(orphan.id, "answered OPS-42")]
    assert await read_rows(db_url, "SELECT count(*) AS n FROM runs") == [{"n": 2}]


@pytest.mark.parametrize("missed", ["latest", "skip"])
async def test_fire_times_missed_while_every_process_was_down_follow_the_policy(
    db_url: str, tmp_path: Path, missed: str
) -> None:
    async with api(db_url, tmp_path, cron_missed=missed) as (client, h):
        made = await make(client, cron="0 * * * *", input="Look at OPS-51")
        first = at(made["next_fire_at"])
        # Down from before `first` until 3 h 10 min after it: four hourly times passed, the latest 10 min ago.
        back = first + timedelta(hours=3, minutes=10)
        runs = await Scheduler(h.engine).fire_due(now=back)
        for run_id in runs:
            assert await ended(h, run_id) == "succeeded"
        listed = await fires(client, made["id"])
        schedule = (await client.get("/v1/schedules")).json()["schedules"][0]
        assert at(schedule["next_fire_at"]) == first + timedelta(hours=4)  # the next future time
        if missed == "latest":
            assert len(runs) == 1
            assert [(at(f["fire_at"]), f["status"], f["run_id"]) for f in listed] == [
                (first + timedelta(hours=3), "succeeded", runs[0])
            ]
        else:
            assert runs == []
            assert [(at(f["fire_at"]), f["status"], f["run_id"]) for f in listed] == [
                (first + timedelta(hours=3), "skipped", None)
            ]
            assert "TICKETIQ_CRON_MISSED is skip" in listed[0]["reason"]
            assert await read_rows(db_url, "SELECT 1 FROM runs") == []
        # Back up: the next time is on time and fires under either policy.
        on_time = await Scheduler(h.engine).fire_due(now=first + timedelta(hours=4, seconds=3))
        assert len(on_time) == 1
        assert await ended(h, on_time[0]) == "succeeded"


async def test_a_fire_whose_run_failed_is_failed_with_the_run_s_reason(db_url: str, tmp_path: Path) -> None:
    held = asyncio.Event()
    probe = Probe(hold=held)  # the run's read waits at the vendor until its process "dies"
    async with api(db_url, tmp_path, probe=probe, crash_resume_entries=False) as (client, h):
        made = await make(client, input="Look at OPS-61")
        (run_id,) = await Scheduler(h.engine).fire_due(now=at(made["next_fire_at"]))
        await eventually(_in_flight(probe), what="the read reaching the vendor")
        await kill_driver(h.engine, run_id)
        await lapse(db_url, run_id)
        await h.process.elector.sweeper.sweep_once(lapsed=True)
        assert await ended(h, run_id) == "failed"
        held.set()
        listed = await fires(client, made["id"])
    assert [(f["run_id"], f["status"], f["outcome"]) for f in listed] == [(run_id, "failed", None)]
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in listed[0]["reason"]
    assert "cron" in listed[0]["reason"]


def _in_flight(probe: Probe) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return probe.in_flight > 0

    return check


async def test_a_fire_taken_over_between_its_outcome_and_the_hand_on_records_the_outcome_once(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        real = h.engine.deps.hand_ons["cron"]
        stuck, go = asyncio.Event(), asyncio.Event()
        details: list[dict[str, Any]] = []

        async def hand_on(driver: Any, answer: str) -> dict[str, Any]:
            details.append(await real(driver, answer))
            if len(details) == 1:
                stuck.set()
                await go.wait()  # the first process never gets past here: it is killed
            return details[-1]

        h.engine.deps.hand_ons["cron"] = hand_on
        made = await make(client, input="Look at OPS-71")
        (run_id,) = await Scheduler(h.engine).fire_due(now=at(made["next_fire_at"]))
        await asyncio.wait_for(stuck.wait(), 30)
        await kill_driver(h.engine, run_id)
        await lapse(db_url, run_id)
        await h.process.elector.sweeper.sweep_once(lapsed=True)
        assert await ended(h, run_id) == "succeeded"
        listed = await fires(client, made["id"])
        run = (await client.get(f"/v1/runs/{run_id}")).json()
    assert details == [{"fire_outcome": "recorded"}, {"fire_outcome": "kept"}]  # the hook ran twice, recorded once
    assert [(f["status"], f["outcome"]) for f in listed] == [("succeeded", "answered OPS-71")]
    assert (run["attempt"], run["losses"]) == (2, 1)
    recorded = await read_rows(db_url, "SELECT outcome_attempt FROM schedule_fires")
    assert recorded == [{"outcome_attempt": 1}]  # the first attempt's record stands
    assert len(h.asked) == 2  # the model was never asked again


async def test_recording_a_fire_s_outcome_is_fenced_by_the_attempt(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, h):
        made = await make(client, input="Look at OPS-81")
        due = at(made["next_fire_at"])
        key = run_keys.cron(made["id"], due)
        scheduler = Scheduler(h.engine)
        assert await scheduler.store.fire(made["id"], due + timedelta(minutes=1), due, key, False, None, "test")
        helper = h.engine.deps.catalog.get("helper")
        run = await h.engine.create_run(helper, "Look at OPS-81", may_wait=False, channel="cron", idempotency_key=key)
        handle = h.engine.deps.store.bound(run.id, 0)
        async with await psycopg.AsyncConnection.connect(db_url) as takeover:
            # I3: a takeover raises the attempt while the statement waits on the checkpoint row.
            await takeover.execute("UPDATE checkpoints SET attempt = attempt + 1 WHERE run_id = %s", (run.id,))
            waiting = asyncio.create_task(handle.record_fire_outcome("from the old attempt"))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await takeover.commit()
        with pytest.raises(Fenced):
            await waiting
        assert (await read_rows(db_url, "SELECT outcome FROM schedule_fires")) == [{"outcome": None}]
        with pytest.raises(Fenced):  # and the old attempt, asked again, matches nothing
            await handle.record_fire_outcome("from the old attempt")
        current = h.engine.deps.store.bound(run.id, 1)
        assert await current.record_fire_outcome("from the new attempt") == (True, True)
        assert await current.record_fire_outcome("once more") == (True, False)  # recorded once
        plain = await h.engine.create_run(helper, "Look at OPS-82", may_wait=False, channel="cron")
        assert await h.engine.deps.store.bound(plain.id, 0).record_fire_outcome("x") == (False, False)
    rows = await read_rows(db_url, "SELECT outcome, outcome_attempt, run_id::text AS run_id FROM schedule_fires")
    assert rows == [{"outcome": "from the new attempt", "outcome_attempt": 1, "run_id": run.id}]


async def test_a_schedule_the_agents_file_declares_is_seeded_once_across_process_starts(
    db_url: str, tmp_path: Path
) -> None:
    declared = {"name": "morning", "agent": "helper", "cron": "0 9 * * mon-fri", "timezone": "Europe/Berlin",
                "input": "Look at OPS-91"}  # fmt: skip

    def settings_with(schedule: dict[str, str]) -> Settings:
        path = tmp_path / "agents.yaml"
        path.write_text(yaml.safe_dump({
            "agents": {"helper": {"system_prompt": "You help.", "owner": "tester", "tools": []}},
            "schedules": [schedule],
        }))  # fmt: skip
        return Settings(home=tmp_path, database_url=db_url, seal_keys="test:engine-test-secret", agents=path,
                        lead=False)  # fmt: skip

    async def starts(settings: Settings, n: int) -> None:
        processes = await asyncio.gather(*(AppProcess.start(settings) for _ in range(n)))
        for process in processes:
            await process.stop()

    await starts(settings_with(declared), 2)  # two processes starting together
    await starts(settings_with(declared), 1)  # and a restart
    rows = await read_rows(db_url, "SELECT id::text AS id, name, cron, timezone, next_fire_at FROM schedules")
    assert [(r["name"], r["cron"], r["timezone"]) for r in rows] == [("morning", "0 9 * * mon-fri", "Europe/Berlin")]
    assert rows[0]["next_fire_at"].astimezone(ZoneInfo("Europe/Berlin")).hour == 9

    await starts(settings_with({**declared, "cron": "30 9 * * mon-fri"}), 1)  # the file changed its time
    changed = await read_rows(db_url, "SELECT id::text AS id, cron, next_fire_at FROM schedules")
    assert [(c["id"], c["cron"]) for c in changed] == [(rows[0]["id"], "30 9 * * mon-fri")]
    assert changed[0]["next_fire_at"].minute == 30

    await read_rows(db_url, "UPDATE schedules SET deleted_at = now(), deleted_by = 'ops'")
    await starts(settings_with(declared), 1)  # a declared schedule a person deleted stays deleted
    assert await read_rows(db_url, "SELECT 1 FROM schedules WHERE deleted_at IS NULL") == []
    audit = await read_rows(db_url, "SELECT action FROM audit_log WHERE action LIKE 'schedule.%%' ORDER BY id")
    assert [a["action"] for a in audit] == ["schedule.declared", "schedule.redeclared"]


async def test_a_fire_s_key_cannot_be_squatted_through_the_api_and_the_fire_runs_its_own_agent(
    db_url: str, tmp_path: Path
) -> None:
    # I19: before issue 15 a caller could send the fire's key (`cron:<schedule>:<time>`, printable) as its
    # Idempotency-Key; the fire then found that run, linked it, and the schedule's agent never ran.
    async with api(db_url, tmp_path) as (client, h):
        made = await make(client, input="Look at OPS-23")
        due = at(made["next_fire_at"])
        mallory = {"Authorization": f"Bearer {await h.token('mallory', 'caller')}"}
        printable = f"cron:{made['id']}:{due.astimezone(UTC).isoformat()}"
        squatter = await client.post("/v1/runs", json={"agent": "helper", "input": "Look at OPS-99"},
                                     headers={**mallory, "Idempotency-Key": printable})  # fmt: skip
        assert squatter.status_code == 201, squatter.text
        tabbed = await client.post("/v1/runs", json={"agent": "helper", "input": "Look at OPS-99"},
                                   headers={**mallory, "Idempotency-Key": printable.replace(":", "\t", 2)})  # fmt: skip
        assert tabbed.status_code == 422 and tabbed.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
        (fired,) = await Scheduler(h.engine).fire_due(now=due)
        assert fired != squatter.json()["id"]
        assert await ended(h, fired) == "succeeded"
        assert await ended(h, squatter.json()["id"]) == "succeeded"
        listed = await fires(client, made["id"])
        run = (await client.get(f"/v1/runs/{fired}")).json()
    assert [(f["run_id"], f["status"], f["outcome"]) for f in listed] == [(fired, "succeeded", "answered OPS-23")]
    assert (run["channel"], run["agent"], run["created_by"]) == ("cron", "helper", "ops")


async def test_a_fire_refuses_a_run_under_its_key_that_it_did_not_make(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        made = await make(client, input="Look at OPS-24")
        due = at(made["next_fire_at"])
        helper = h.engine.deps.catalog.get("helper")
        # A row put straight into the database under the fire's key: a cron run of the schedule's agent in
        # every way but who made it.
        forged = await h.engine.create_run(helper, "Look at OPS-98", may_wait=False, channel="cron",
                                           idempotency_key=run_keys.cron(made["id"], due), actor="mallory",
                                           created_by="ops")  # fmt: skip
        scheduler = Scheduler(h.engine)
        with caplog.at_level(logging.ERROR, logger="ticketiq.intake.scheduler"):
            assert await scheduler.fire_due(now=due) == []
        assert await scheduler.fire_due(now=due) == []  # failed for good: not tried again
        listed = await fires(client, made["id"])
        forged_then = (await client.get(f"/v1/runs/{forged.id}")).json()
        assert len(h.asked) == 0  # no model step was asked for either run
        # Should the forged run be started all the same, its hand-on finds no fire of its own to record on.
        assert await h.engine.start(forged.id)
        assert await ended(h, forged.id) == "succeeded"
        after = await fires(client, made["id"])
    assert [(f["run_id"], f["status"], f["outcome"]) for f in listed] == [(None, "failed", None)]
    assert forged.id in listed[0]["reason"] and "mallory" in listed[0]["reason"]
    assert forged_then["status"] == "queued"  # never started, handed on or linked by the fire
    assert any(forged.id in r.getMessage() and r.levelno == logging.ERROR for r in caplog.records)
    assert after == listed
