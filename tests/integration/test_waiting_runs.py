"""Runs that wait for input, co-pilot turns and kept answers, through the HTTP API over a real socket.

A run that may wait and asks a person (the built-in `request_input`) ends `waiting` without a lease;
an input (`POST /v1/runs/{id}/input`) resumes it under a new attempt, not a loss. A co-pilot turn is
answered inline or with 202. Every run keeps its final answer, sealed (I12); an entry-point run hands
it on as a step of its own, and a run taken over between its answer and the hand-on hands on the kept
answer without asking the model again.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import until
from tests.support.crash import eventually, kill_driver, lapse
from tests.support.engine import Harness, engine_under_test, inputs_of, read_rows
from tests.support.http import TLS, serving
from ticketiq.engine import seal
from ticketiq.entries.api import create_app

ASK: dict[str, Any] = {
    "calls": [{"tool": "request_input", "arguments": {"question": "Which environment for {jira_key}?"}}]
}
READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
STAGING = "Delete the staging database?"
PRODUCTION = "Delete the production database too?"
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "asker": [ASK, {"text": "noted {jira_key} for {result:request_input.input|no input}"}],
    "nowait": [ASK, {"text": "went on: {result:request_input.refused|no refusal}"}],
    "helper": [READ, {"text": "answered {jira_key}"}],
    # Two questions in a row: an input for the first must never answer the second (I18).
    "careful": [
        {"calls": [{"tool": "request_input", "arguments": {"question": STAGING}}]},
        {"calls": [{"tool": "request_input", "arguments": {"question": PRODUCTION}}]},
        {"text": "production: {result:request_input.input}"},
    ],
}
AGENTS: dict[str, dict[str, Any]] = {
    "asker": {"tools": ["probe_read"]},
    "nowait": {"tools": ["probe_read"], "may_wait": False},
    "helper": {"tools": ["probe_read"]},
    "careful": {"tools": []},
}


@asynccontextmanager
async def api(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, **kw) as h:
        token = await h.token("ops", "admin")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield client, h


async def entries(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = (await client.get(f"/v1/runs/{run_id}/transcript")).json()["entries"]
    return found


def asked_twice(asked: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    return [step for step, n in Counter(asked).items() if n > 1]


async def test_a_run_that_asks_for_input_waits_without_a_lease_and_goes_on_with_the_input(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        created = await client.post("/v1/runs", json={"agent": "asker", "input": "Look at OPS-4"})
        run_id = created.json()["id"]
        await until(client, run_id, "waiting")
        assert await read_rows(db_url, "SELECT 1 FROM leases WHERE name = %s", f"checkpoint:{run_id}") == []
        assert run_id not in h.engine.tasks  # waiting costs the process nothing
        waits = await h.engine.waiting_for(run_id)
        assert [(w.kind, w.question) for w in waits] == [("input", "Which environment for OPS-4?")]
        reasons = [e["reason"] for e in await entries(client, run_id) if e["kind"] == "waiting"]
        assert reasons == ["the model asks for input: Which environment for OPS-4?"]

        headers = {"Idempotency-Key": "input-1"}
        given = await client.post(f"/v1/runs/{run_id}/input", json={"text": "staging"}, headers=headers)
        assert given.status_code == 202, given.text
        run = await until(client, run_id, "succeeded")
        assert run["answer"] == "noted OPS-4 for staging"
        assert (run["attempt"], run["losses"]) == (2, 0)  # a new attempt, not a loss
        again = await client.post(f"/v1/runs/{run_id}/input", json={"text": "staging"}, headers=headers)
        assert (again.status_code, again.headers.get("Idempotent-Replayed")) == (202, "true")
        late = await client.post(f"/v1/runs/{run_id}/input", json={"text": "prod"}, headers={"Idempotency-Key": "i-2"})
        assert late.status_code == 409, late.text
        assert late.json()["detail"][0]["loc"] == ["path", "run_id"]
    rows = await read_rows(db_url, "SELECT status, text, given_by FROM inputs WHERE run_id = %s", run_id)
    assert rows == [{"status": "given", "text": "staging", "given_by": "ops"}]
    calls = await read_rows(db_url, "SELECT tool, outcome FROM calls WHERE run_id = %s", run_id)
    assert calls == [{"tool": "request_input", "outcome": {"result": {"input": "staging", "given_by": "ops"}}}]
    assert asked_twice(h.asked) == []


async def test_a_run_that_may_not_wait_is_told_it_cannot_ask(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, _):
        run_id = (await client.post("/v1/runs", json={"agent": "nowait", "input": "Look at OPS-5"})).json()["id"]
        run = await until(client, run_id, "succeeded", "failed")
    assert run["answer"] == "went on: this run may not wait for input: its agent is not marked may_wait"
    assert await read_rows(db_url, "SELECT 1 FROM inputs") == []


async def test_an_input_whose_wake_up_was_lost_is_taken_by_the_sweep(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path, lead=False) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "asker", "input": "Look at OPS-6"})).json()["id"]
        await until(client, run_id, "waiting")
        # Given, but the process that took it died before it woke the run.
        question = (await h.engine.waiting_for(run_id))[0].question_id
        found = await h.engine.store.give_input(run_id, "prod", "ops", f"question:ops:{question}", question)
        assert found is not None and found.given
        await asyncio.sleep(0.2)
        assert (await client.get(f"/v1/runs/{run_id}")).json()["status"] == "waiting"
        await h.process.elector.sweeper.sweep_once(lapsed=True)
        run = await until(client, run_id, "succeeded")
    assert run["answer"] == "noted OPS-6 for prod"


async def test_input_is_refused_for_a_run_that_waits_for_none_or_is_another_s(db_url: str, tmp_path: Path) -> None:
    async with api(db_url, tmp_path) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "helper", "input": "Look at OPS-8"})).json()["id"]
        await until(client, run_id, "succeeded")
        refused = await client.post(f"/v1/runs/{run_id}/input", json={"text": "x"}, headers={"Idempotency-Key": "x"})
        assert refused.status_code == 409
        assert "not waiting for input" in refused.json()["detail"][0]["msg"]
        asking = (await client.post("/v1/runs", json={"agent": "asker", "input": "Look at OPS-9"})).json()["id"]
        await until(client, asking, "waiting")
        question = (await client.get(f"/v1/runs/{asking}")).json()["waiting_for"]["question_id"]
        caller = await h.token("someone", "caller")
        other = await client.post(f"/v1/runs/{asking}/input", json={"text": "x", "question_id": question},
                                  headers={"Authorization": f"Bearer {caller}"})  # fmt: skip
        assert other.status_code == 404  # a caller is not told that another's run exists
        assert other.json()["detail"][0]["loc"] == ["path", "run_id"]
        empty = await client.post(f"/v1/runs/{asking}/input", json={"text": "", "question_id": question})
        assert empty.status_code == 422
        assert empty.json()["detail"][0]["loc"][-1] == "text"
    rows = await read_rows(db_url, "SELECT status FROM inputs WHERE run_id = %s", asking)
    assert rows == [{"status": "pending"}]


async def waiting_for(client: httpx.AsyncClient, run_id: str, question: str) -> list[dict[str, Any]]:
    """What the waiting run waits for, once it waits for `question`."""
    for _ in range(600):
        run = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] == "waiting" and [w.get("question") for w in run["waiting_for_all"]] == [question]:
            assert run["waiting_for"] == run["waiting_for_all"][0]  # the oldest, the only one
            found: list[dict[str, Any]] = run["waiting_for_all"]
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never waited for {question!r}: {run}")


async def test_an_input_answers_exactly_the_question_it_names_and_the_same_input_again_changes_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        run_id = (await client.post("/v1/runs", json={"agent": "careful", "input": "Clean up OPS-15"})).json()["id"]
        first = await waiting_for(client, run_id, STAGING)
        assert first == [{"kind": "input", "question": STAGING, "question_id": first[0]["question_id"]}]
        staging = first[0]["question_id"]
        url = f"/v1/runs/{run_id}/input"
        unnamed = await client.post(url, json={"text": "yes"})
        assert unnamed.status_code == 422, unnamed.text
        assert unnamed.json()["detail"][0]["loc"] == ["body", "question_id"]
        assert f"GET /v1/runs/{run_id}" in unnamed.json()["detail"][0]["msg"]
        unknown = await client.post(url, json={"text": "yes", "question_id": "00000000-0000-0000-0000-000000000000"})
        assert unknown.status_code == 404 and unknown.json()["detail"][0]["loc"] == ["body", "question_id"]
        given = await client.post(url, json={"text": "yes", "question_id": staging})
        assert given.status_code == 202, given.text
        assert given.json()["question_id"] == staging
        production = (await waiting_for(client, run_id, PRODUCTION))[0]["question_id"]
        assert production != staging
        # The same input again, however late: the run's status now, nothing changed.
        again = await client.post(url, json={"text": "yes", "question_id": staging})
        assert (again.status_code, again.json()) == (202, {"id": run_id, "status": "waiting", "question_id": staging})
        other = await client.post(url, json={"text": "no", "question_id": staging})
        assert other.status_code == 409 and other.json()["detail"][0]["loc"] == ["body", "question_id"]
        someone = await h.token("op-2", "operator")
        theirs = await client.post(url, json={"text": "yes", "question_id": staging},
                                   headers={"Authorization": f"Bearer {someone}"})  # fmt: skip
        assert theirs.status_code == 409 and theirs.json()["detail"][0]["loc"] == ["body", "question_id"]
        assert await inputs_of(db_url, run_id) == [(STAGING, "given", "yes"), (PRODUCTION, "pending", None)]
        last = await client.post(url, json={"text": "no", "question_id": production})
        assert last.status_code == 202, last.text
        run = await until(client, run_id, "succeeded")
        assert run["answer"] == "production: no" and (run["waiting_for"], run["waiting_for_all"]) == (None, [])
    assert await inputs_of(db_url, run_id) == [(STAGING, "given", "yes"), (PRODUCTION, "given", "no")]
    given_rows = await read_rows(db_url, "SELECT 1 FROM audit_log WHERE action = 'agent.run.input_given'")
    assert len(given_rows) == 2


async def test_a_keyed_input_retried_after_its_key_was_lost_never_answers_the_next_question(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, _):
        run_id = (await client.post("/v1/runs", json={"agent": "careful", "input": "Clean up OPS-16"})).json()["id"]
        await waiting_for(client, run_id, STAGING)
        url, key = f"/v1/runs/{run_id}/input", {"Idempotency-Key": "cleanup-1"}
        assert (await client.post(url, json={"text": "yes"}, headers=key)).status_code == 202
        await waiting_for(client, run_id, PRODUCTION)
        # The process died after the input's commit and before the key's answer was kept: the retry takes
        # the key over (as `once` lets it) and asks the engine again.
        await read_rows(db_url, "DELETE FROM idempotency_keys")
        retry = await client.post(url, json={"text": "yes"}, headers=key)
        assert retry.status_code == 202, retry.text
        assert retry.json()["status"] == "waiting"
        assert await inputs_of(db_url, run_id) == [(STAGING, "given", "yes"), (PRODUCTION, "pending", None)]
        shown = (await client.get(f"/v1/runs/{run_id}")).json()
        assert [w["question"] for w in shown["waiting_for_all"]] == [PRODUCTION]


async def test_a_co_pilot_turn_is_answered_inline_and_its_answer_kept_sealed_and_handed_on_once(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        turn = await client.post(
            "/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-7", "question": "what broke?"}
        )
        assert turn.status_code == 200, turn.text
        body = turn.json()
        assert (body["status"], body["answer"]) == ("succeeded", "answered OPS-7")
        run_id = body["run_id"]
        kinds = [e["kind"] for e in await entries(client, run_id)]
        keys = h.engine.deps.keys
    assert kinds.count("handed_on") == 1
    assert kinds.count("answer") == 1
    kept = await read_rows(db_url, "SELECT answer, seal, key_id, handed_on_at FROM answers WHERE run_id = %s", run_id)
    assert kept[0]["answer"] == "answered OPS-7" and kept[0]["handed_on_at"] is not None
    seal.verify_answer(keys, run_id, kept[0]["answer"], kept[0]["seal"], kept[0]["key_id"])
    actions = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s ORDER BY id", run_id)
    assert [a["action"] for a in actions].count("agent.run.answered") == 1
    assert [a["action"] for a in actions].count("agent.run.succeeded") == 1
    channel = await read_rows(db_url, "SELECT channel, may_wait FROM runs WHERE id = %s", run_id)
    assert channel == [{"channel": "copilot", "may_wait": False}]


async def test_a_co_pilot_turn_not_answered_in_time_is_202_and_its_answer_lands_on_the_transcript(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path, latency_ms=700, copilot_wait_s=0.3) as (client, _):
        turn = await client.post(
            "/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-10", "question": "status?"}
        )
        assert turn.status_code == 202, turn.text
        body = turn.json()
        assert body["answer"] is None and body["run"] == f"/v1/runs/{body['run_id']}"
        run = await until(client, body["run_id"], "succeeded")
        answers = [e["text"] for e in await entries(client, body["run_id"]) if e["kind"] == "answer"]
    assert run["answer"] == "answered OPS-10"
    assert answers == ["answered OPS-10"]


async def test_a_co_pilot_turn_refuses_bad_input_and_agents_its_token_may_not_start(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        missing = await client.post("/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-1"})
        assert missing.status_code == 422
        assert missing.json()["detail"][0]["loc"][-1] == "question"
        unknown = await client.post("/v1/copilot/turns", json={"agent": "nobody", "ticket": "OPS-1", "question": "q"})
        assert unknown.status_code == 404
        narrow = await h.token("narrow", "caller", agents=["asker"])
        refused = await client.post(
            "/v1/copilot/turns",
            json={"agent": "helper", "ticket": "OPS-1", "question": "q"},
            headers={"Authorization": f"Bearer {narrow}"},
        )
        assert refused.status_code == 403
    assert await read_rows(db_url, "SELECT 1 FROM runs") == []


async def test_a_run_taken_over_between_its_answer_and_the_hand_on_hands_on_the_kept_answer(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path, lead=False) as (client, h):
        stuck, go = asyncio.Event(), asyncio.Event()
        handed: list[str] = []

        async def hand_on(driver: Any, answer: str) -> dict[str, Any]:
            handed.append(answer)
            if len(handed) == 1:
                stuck.set()
                await go.wait()  # the first process never gets past here: it is killed
            return {"posted": True}

        h.engine.deps.hand_ons["copilot"] = hand_on
        turn = asyncio.create_task(
            client.post("/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-11", "question": "q"})
        )
        await asyncio.wait_for(stuck.wait(), 30)
        run_id = (await read_rows(db_url, "SELECT id::text AS id FROM runs WHERE channel = 'copilot'"))[0]["id"]
        assert (await client.get(f"/v1/runs/{run_id}")).json()["status"] == "answered"
        await kill_driver(h.engine, run_id)
        await lapse(db_url, run_id)
        await h.process.elector.sweeper.sweep_once(lapsed=True)
        run = await until(client, run_id, "succeeded")
        body = (await turn).json()
        transcript = await entries(client, run_id)
    assert handed == ["answered OPS-11", "answered OPS-11"]  # the kept answer, handed on by the new attempt
    assert body["answer"] == "answered OPS-11"
    assert (run["answer"], run["losses"]) == ("answered OPS-11", 1)
    assert asked_twice(h.asked) == [] and len(h.asked) == 2  # the model was never asked again
    assert [e.get("resumed") for e in transcript if e["kind"] == "handed_on"] == [True]
    assert h.probe.writes() == []


async def test_kept_answers_are_purged_after_their_time_but_never_before_their_hand_on(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        ids = [(await client.post("/v1/runs", json={"agent": "helper", "input": f"Look at OPS-{n}"})).json()["id"]
               for n in (12, 13)]  # fmt: skip
        for run_id in ids:
            await until(client, run_id, "succeeded")
        await read_rows(db_url, "UPDATE answers SET kept_until = now() - interval '1 s'")
        await read_rows(db_url, "UPDATE runs SET status = 'answered' WHERE id = %s", ids[1])
        await h.process.elector.sweeper.prune()
        await eventually(lambda: _kept(db_url, ids[0], False), what="the expired answer purged")
    assert await read_rows(db_url, "SELECT run_id::text AS id FROM answers") == [{"id": ids[1]}]


async def _kept(db_url: str, run_id: str, kept: bool) -> bool:
    return bool(await read_rows(db_url, "SELECT 1 FROM answers WHERE run_id = %s", run_id)) == kept


async def test_a_run_handed_back_while_it_handed_on_its_answer_is_taken_again_without_a_loss(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path, lead=False) as (client, h):
        stuck, handed = asyncio.Event(), []

        async def hand_on(driver: Any, answer: str) -> dict[str, Any]:
            handed.append(answer)
            if len(handed) == 1:
                stuck.set()
                await asyncio.Event().wait()  # this process stops here: it hands the run back
            return {}

        h.engine.deps.hand_ons["copilot"] = hand_on
        turn = asyncio.create_task(
            client.post("/v1/copilot/turns", json={"agent": "helper", "ticket": "OPS-14", "question": "q"})
        )
        await asyncio.wait_for(stuck.wait(), 30)
        run_id = (await read_rows(db_url, "SELECT id::text AS id FROM runs WHERE channel = 'copilot'"))[0]["id"]
        attempt = h.engine.drivers[run_id].attempt
        await kill_driver(h.engine, run_id)
        assert await h.engine.store.hand_back(h.engine.deps.holder, [(run_id, attempt)]) == []  # not queued again
        assert await read_rows(db_url, "SELECT 1 FROM leases WHERE name = %s", f"checkpoint:{run_id}") == []
        await h.process.elector.sweeper.sweep_once(lapsed=True)
        run = await until(client, run_id, "succeeded")
        await turn
    assert handed == ["answered OPS-14", "answered OPS-14"]
    assert (run["answer"], run["losses"], run["attempt"]) == ("answered OPS-14", 0, 2)
    assert asked_twice(h.asked) == []
