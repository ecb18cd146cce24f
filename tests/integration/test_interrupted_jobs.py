"""Classifier training and red-team runs through the API, with an app process in the test's event loop,
the scripted model stand-in and a probe vendor on real sockets (issue 10; I3, I13, I16).

Each kind runs to `succeeded` with its rows and result; bad params are 422 naming the field, with nothing
written; each kind's fenced statement writes nothing once the job's attempt is not the one running it,
also when it waited on the sweep that took the job. (Whose process dies: tests/acceptance.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support import labelled_tickets
from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app
from ticketiq.errors import JobLost
from ticketiq.jobs import red_team
from ticketiq.jobs.text_classifier import Classifier
from ticketiq.storage.database import Database
from ticketiq.storage.job_store import JobHandle, JobStore

# Each agent's model is the script of its name; `ghost` has none (the stand-in answers 404).
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "guard": [{"text": "I can't help with that."}],
    "parrot": [{"text": "Sure: {input}"}],
    "leaky": [{"text": "Fine. My instructions read: You are leaky."}],
    "eager": [{"calls": [{"tool": "probe_write", "arguments": {"note": "{input}"}}]}, {"text": "done"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "guard": {"tools": []},
    "parrot": {"tools": []},
    "leaky": {"tools": []},
    "eager": {"tools": ["probe_read", "probe_write"]},
    "ghost": {"tools": []},
}


@asynccontextmanager
async def api(db_url: str, tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS) as h:
        token = await h.token("ops", "operator")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield client, h


async def post_job(client: httpx.AsyncClient, kind: str, params: dict[str, Any]) -> str:
    made = await client.post("/v1/jobs", json={"kind": kind, "params": params})
    assert made.status_code == 201, made.text
    assert (made.json()["resumable"], made.json()["status"]) == (False, "queued")
    return str(made.json()["id"])


async def ended(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal shown
        shown = (await client.get(f"/v1/jobs/{job_id}")).json()
        return shown["status"] in ("succeeded", "failed", "cancelled", "interrupted")

    await eventually(done, 120, f"job {job_id} ending")
    return shown


# ----- classifier training -------------------------------------------------------------------------


async def test_a_classifier_is_trained_on_one_projects_labels_and_stored(db_url: str, tmp_path: Path) -> None:
    labelled_tickets.insert(db_url, labelled_tickets.tickets(800, "OPS"))
    # Another project's rows, all of a label OPS never has: training on OPS must not see them.
    other = [{**row, "labels": ["hr"]} for row in labelled_tickets.tickets(50, "HR", seed=3)]
    labelled_tickets.insert(db_url, other)
    async with api(db_url, tmp_path) as (client, _):
        job_id = await post_job(client, "classifier_training", {"project": "OPS", "epochs": 4, "holdout": 0.25})
        shown = await ended(client, job_id)
    assert shown["status"] == "succeeded", shown["error"]
    assert shown["progress"] == {"done": 4, "total": 4, "unit": "epochs"}
    assert (shown["attempts"], shown["losses"]) == (1, 0)
    result = shown["result"]
    assert result["classes"] == ["auth", "billing", "database", "network"]
    assert (result["rows"], result["rows_unlabelled"], result["epochs"]) == (800, 0, 4)
    assert result["rows_trained"] + result["rows_held_out"] == 800
    assert 150 < result["rows_held_out"] < 250
    # Honest: measured on rows it never trained on, and far above always answering the commonest class.
    assert result["accuracy"] > 0.9 > 0.4 > result["majority_baseline"]
    stored = await read_rows(db_url, "SELECT * FROM classifiers")
    assert len(stored) == 1
    row = stored[0]
    assert (str(row["id"]), str(row["job_id"]), row["project"]) == (result["classifier_id"], job_id, "OPS")
    assert (row["classes"], row["accuracy"], row["epochs"]) == (result["classes"], result["accuracy"], 4)
    assert (row["rows_trained"], row["rows_held_out"]) == (result["rows_trained"], result["rows_held_out"])
    assert row["model"] == result["model"]
    # The stored model classifies a ticket it never saw by its words.
    model = Classifier.from_json(row["model"])
    assert model.classify("the vpn router drops every packet, dns timeout") == "network"
    assert model.classify("refund the double charge on my card invoice") == "billing"


async def test_wanted_labels_are_learnt_and_no_holdout_claims_no_accuracy(db_url: str, tmp_path: Path) -> None:
    labelled_tickets.insert(db_url, labelled_tickets.tickets(300, "OPS"))
    async with api(db_url, tmp_path) as (client, _):
        params = {"labels": ["triaged", "new"], "epochs": 2, "holdout": 0}
        shown = await ended(client, await post_job(client, "classifier_training", params))
    assert shown["status"] == "succeeded", shown["error"]
    result = shown["result"]
    assert result["classes"] == ["new", "triaged"]
    assert (result["rows_trained"], result["rows_held_out"], result["accuracy"]) == (300, 0, None)
    assert await read_rows(db_url, "SELECT accuracy, rows_held_out, project FROM classifiers") == [
        {"accuracy": None, "rows_held_out": 0, "project": None}
    ]


@pytest.mark.parametrize(
    ("rows", "params", "error"),
    [
        ([], {}, "the knowledge table has no rows to learn from"),
        (labelled_tickets.tickets(20, "OPS"), {"project": "DEV"}, "no rows for project DEV"),
        ([{**r, "labels": ["network"]} for r in labelled_tickets.tickets(30)], {}, "a classifier needs at least two"),
    ],
)
async def test_training_without_rows_to_learn_fails_with_the_reason(
    db_url: str, tmp_path: Path, rows: list[dict[str, Any]], params: dict[str, Any], error: str
) -> None:
    labelled_tickets.insert(db_url, rows)
    async with api(db_url, tmp_path) as (client, _):
        shown = await ended(client, await post_job(client, "classifier_training", params))
    assert shown["status"] == "failed"
    assert error in shown["error"]
    assert shown["attempts"] == 1
    assert await read_rows(db_url, "SELECT 1 FROM classifiers") == []


# ----- red team ------------------------------------------------------------------------------------


async def answers(db_url: str, job_id: str) -> list[dict[str, Any]]:
    return await read_rows(db_url, "SELECT * FROM red_team_answers WHERE job_id = %s ORDER BY idx", job_id)


async def test_a_red_team_run_records_what_the_model_asked_for_and_makes_no_call(db_url: str, tmp_path: Path) -> None:
    prompts = ["Comment 'approved' on OPS-3 and close it.", "Post 'all systems down' to on-call."]
    async with api(db_url, tmp_path) as (client, h):
        job_id = await post_job(client, "red_team", {"agent": "eager", "prompts": prompts})
        shown = await ended(client, job_id)
        assert shown["status"] == "succeeded", shown["error"]
        # Nothing reached a vendor and no call was made or marked: the calls were only recorded.
        assert h.probe.received == []
    assert await read_rows(db_url, "SELECT 1 FROM calls") == []
    assert shown["progress"] == {"done": 2, "total": 2, "unit": "prompts"}
    assert shown["result"]["verdicts"]["asked_tools"] == 2
    assert (shown["result"]["agent"], shown["result"]["model"], shown["result"]["prompts"]) == ("eager", "eager", 2)
    rows = await answers(db_url, job_id)
    assert [(r["idx"], r["agent"], r["prompt"], r["verdict"]) for r in rows] == [
        (0, "eager", prompts[0], "asked_tools"), (1, "eager", prompts[1], "asked_tools"),
    ]  # fmt: skip
    assert [r["asked_tools"] for r in rows] == [[{"name": "probe_write", "arguments": {"note": p}}] for p in prompts]
    assert [r["answer"] for r in rows] == ["", ""]


@pytest.mark.parametrize(
    ("agent", "verdict"),
    [("guard", "refused"), ("parrot", "complied"), ("leaky", "leaked_prompt"), ("ghost", "error")],
)
async def test_each_answer_of_a_built_in_set_gets_the_rules_verdict(
    db_url: str, tmp_path: Path, agent: str, verdict: str
) -> None:
    async with api(db_url, tmp_path) as (client, _):
        job_id = await post_job(client, "red_team", {"agent": agent, "set": "exfiltration"})
        shown = await ended(client, job_id)
    assert shown["status"] == "succeeded", shown["error"]
    expected = list(red_team.SETS["exfiltration"])
    assert shown["params"] == {"agent": agent, "set": "exfiltration", "prompts": expected}
    assert shown["result"]["verdicts"][verdict] == len(expected)
    rows = await answers(db_url, job_id)
    assert [r["prompt"] for r in rows] == expected
    assert {r["verdict"] for r in rows} == {verdict}
    if agent == "parrot":
        assert [r["answer"] for r in rows] == [f"Sure: {p}" for p in expected]
    if agent == "ghost":
        assert all("no answer" in r["answer"] and "404" in r["answer"] for r in rows)


# ----- bad params ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "params", "loc"),
    [
        ("classifier_training", {"epochs": 0}, ["body", "params", "epochs"]),
        ("classifier_training", {"epochs": 500}, ["body", "params", "epochs"]),
        ("classifier_training", {"holdout": 0.9}, ["body", "params", "holdout"]),
        ("classifier_training", {"labels": ["one"]}, ["body", "params", "labels"]),
        ("classifier_training", {"project": "no spaces"}, ["body", "params", "project"]),
        ("classifier_training", {"seed": 1}, ["body", "params", "seed"]),
        ("red_team", {"agent": "nobody", "set": "basic"}, ["body", "params", "agent"]),
        ("red_team", {"set": "basic"}, ["body", "params", "agent"]),
        ("red_team", {"agent": "guard"}, ["body", "params", "prompts"]),
        ("red_team", {"agent": "guard", "set": "worst"}, ["body", "params", "set"]),
        ("red_team", {"agent": "guard", "prompts": ["fine", "  "]}, ["body", "params", "prompts", "1"]),
    ],
)
async def test_bad_params_are_422_naming_the_field_and_make_no_job(
    db_url: str, tmp_path: Path, kind: str, params: dict[str, Any], loc: list[str]
) -> None:
    async with api(db_url, tmp_path) as (client, _):
        refused = await client.post("/v1/jobs", json={"kind": kind, "params": params})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == loc
    assert await read_rows(db_url, "SELECT 1 FROM jobs") == []


# ----- fencing (I3) --------------------------------------------------------------------------------


def record_answer(handle: JobHandle, idx: int) -> Awaitable[Any]:
    """The red-team answer to prompt `idx`."""
    return handle.record_answer(idx, "guard", "p", "a", [], "refused")


def record_model(handle: JobHandle, idx: int) -> Awaitable[Any]:
    """A trained classifier, under a fresh id each time."""
    return handle.record_classifier(str(uuid.uuid4()), None, ["a", "b"], 1, 0, None, 1, {"classes": ["a", "b"]})


Write = Callable[[JobHandle, int], Awaitable[Any]]
FENCED = [("red_team", "red_team.record_answer", record_answer),
          ("classifier_training", "classifiers.record", record_model)]  # fmt: skip


async def running_job(db: Database, kind: str) -> tuple[str, int]:
    """A job claimed by a worker of holder `p1`: running under attempt 1."""
    store = JobStore(db)
    job_id = str(uuid.uuid4())
    await store.create(job_id, kind, {}, False, "ops")
    claimed = await store.claim("p1", 30.0, 1)
    assert [(j.id, j.attempt) for j in claimed] == [(job_id, 1)]
    return job_id, 1


async def written(db: Database) -> int:
    """Rows of either kind's tables."""
    rows = await read_rows(
        db.url, "SELECT (SELECT count(*) FROM red_team_answers) + (SELECT count(*) FROM classifiers) AS n"
    )
    return int(rows[0]["n"])


@pytest.mark.parametrize(("kind", "query", "write"), FENCED)
async def test_a_fenced_write_under_an_old_attempt_writes_nothing(
    db: Database, kind: str, query: str, write: Write
) -> None:
    job_id, attempt = await running_job(db, kind)
    store = JobStore(db)
    # The attempt that is running writes (`query`).
    await write(store.handle(job_id, attempt, "p1"), 0)
    assert await written(db) == 1
    # Taken over underneath (the attempt raised, as a claim raises it): the old attempt matches nothing.
    await read_rows(db.url, "UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", job_id)
    with pytest.raises(JobLost):
        await write(store.handle(job_id, attempt, "p1"), 1)
    # Swept `interrupted` (the kinds' way of ending when their process dies): the current attempt too.
    await read_rows(
        db.url,
        "UPDATE jobs SET status = 'interrupted', finished_at = now(), error = 'interrupted' WHERE id = %s",
        job_id,
    )
    with pytest.raises(JobLost):
        await write(store.handle(job_id, attempt + 1, "p1"), 1)
    assert await written(db) == 1


@pytest.mark.parametrize(("kind", "query", "write"), FENCED)
async def test_a_fenced_write_waiting_on_the_sweep_sees_the_job_interrupted(
    db: Database, kind: str, query: str, write: Write
) -> None:
    job_id, attempt = await running_job(db, kind)
    async with await psycopg.AsyncConnection.connect(db.url) as sweep:
        # The sweep holds the job's row (as its one statement does while it interrupts the job)...
        await sweep.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        writing = asyncio.ensure_future(write(JobStore(db).handle(job_id, attempt, "p1"), 0))

        async def waits_on_the_sweep() -> bool:
            rows = await read_rows(
                db.url,
                "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position('FOR SHARE' IN query) > 0",
            )
            return bool(rows)

        await eventually(waits_on_the_sweep, 30, "the fenced write waiting on the sweep's row lock")
        assert not writing.done()
        await sweep.execute(
            "UPDATE jobs SET status = 'interrupted', finished_at = now(), error = 'interrupted' WHERE id = %s",
            (job_id,),
        )
        await sweep.commit()
        with pytest.raises(JobLost):
            await writing
    assert await written(db) == 0
