"""The fine-tuning job through the API (`POST /v1/jobs {kind: "fine_tune"}`), against the OpenAI
stand-in over real sockets and the real Postgres (issue 10 part 3; I2, I3, I13, I14).

Each remote object is counted from the stand-in's write log: a job makes one training file and one
remote fine-tuning job, whatever answers it got (a 500 after the create was applied, a 500 before) and
whichever process finished it. A process "dies" as a SIGKILL leaves it: its liveness connection is
ended by the server, so it loses every lease at once and the leader's sweep hands its job on.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.crash import eventually
from tests.support.engine import kill_liveness, read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins
from ticketiq.agents.catalog import load
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.jobs import training_file
from ticketiq.process import AppProcess
from ticketiq.settings import Settings
from ticketiq.storage.token_store import TokenStore

BASE = "gpt-4o-mini-2024-07-18"
EXAMPLES = [
    {"messages": [{"role": "user", "content": f"Checkout fails for order {n}"},
                  {"role": "assistant", "content": "billing, checkout"}]}
    for n in range(12)
]  # fmt: skip


@pytest.fixture(autouse=True)
async def short_training(standins: Standins) -> None:
    """The stand-in's remote jobs train for 0.2 s; a test that needs one to run on sets its own."""
    await standins.options(fine_tune_duration_s=0.2)


@asynccontextmanager
async def app_process(standins: Standins, tmp: Path, name: str = "a", **overrides: Any) -> AsyncIterator[AppProcess]:
    home = tmp / name
    home.mkdir(exist_ok=True)
    # A short write budget: a request in doubt is looked up a second after its mark (I14).
    settings = standins.settings(home=home, seal_keys="t:fine-tune-secret", **{"write_budget_s": 1.0, **overrides})
    process = await AppProcess.start(settings)
    try:
        yield process
    finally:
        await process.stop()


@asynccontextmanager
async def api(process: AppProcess) -> AsyncIterator[httpx.AsyncClient]:
    token = tokens.mint()
    assert await TokenStore(process.db).create("ops", "operator", None, tokens.token_hash(token), "test")
    async with (
        serving(create_app(process.settings, process)) as base,
        httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        yield client


async def post_fine_tune(client: httpx.AsyncClient, **params: Any) -> str:
    body = {"model": BASE, "training": {"examples": EXAMPLES}, "poll_s": 0.05, **params}
    made = await client.post("/v1/jobs", json={"kind": "fine_tune", "params": body})
    assert made.status_code == 201, made.text
    assert (made.json()["kind"], made.json()["resumable"]) == ("fine_tune", True)
    return str(made.json()["id"])


async def job_row(db_url: str, job_id: str) -> dict[str, Any]:
    return (await read_rows(db_url, "SELECT * FROM jobs WHERE id = %s", job_id))[0]


async def ends(db_url: str, job_id: str) -> dict[str, Any]:
    async def ended() -> bool:
        return (await job_row(db_url, job_id))["status"] in ("succeeded", "failed", "cancelled", "interrupted")

    await eventually(ended, 60, f"job {job_id} ending")
    return await job_row(db_url, job_id)


async def creates(standins: Standins, job_id: str) -> list[dict[str, Any]]:
    """The creates of remote jobs carrying this job's key, as the stand-in received them."""
    return await standins.writes(vendor="openai", operation="create_fine_tuning_job", key=f"ticketiq_job={job_id}")


async def uploads(standins: Standins, job_id: str) -> list[dict[str, Any]]:
    return await standins.writes(vendor="openai", operation="upload_file", key=training_file.file_name(job_id))


def applied(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [w for w in writes if w["effect"] == "applied"]


async def remote(standins: Standins, remote_id: str) -> dict[str, Any]:
    answer = await standins.admin.get(f"/v1/fine_tuning/jobs/{remote_id}", headers={"Authorization": "Bearer t"})
    answer.raise_for_status()
    found: dict[str, Any] = answer.json()
    return found


async def test_a_fine_tune_job_uploads_once_creates_once_and_names_the_model(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client, suffix="triage", training={"examples": EXAMPLES, "agent": "triage"})
        row = await ends(db_url, job_id)
        assert row["status"] == "succeeded", row["error"]
        shown = (await client.get(f"/v1/jobs/{job_id}")).json()

    made = applied(await creates(standins, job_id))
    files = applied(await uploads(standins, job_id))
    assert len(made) == 1 and len(files) == 1  # exactly once each
    remote_id, file_id = made[0]["ref"], files[0]["ref"]
    assert made[0]["body"]["metadata"] == {"ticketiq_job": job_id}
    assert (made[0]["body"]["model"], made[0]["body"]["training_file"], made[0]["body"]["suffix"]) == (
        BASE, file_id, "triage",
    )  # fmt: skip
    assert shown["result"] == {
        "fine_tuned_model": f"ft:{BASE}:ticketiq:triage:{remote_id.removeprefix('ftjob-')[:8]}",
        "remote_job": remote_id,
        "training_file": file_id,
        "base_model": BASE,
        "trained_tokens": (await remote(standins, remote_id))["trained_tokens"],
    }
    assert shown["progress"] == {"done": 4, "total": 4, "unit": "steps"}
    assert (shown["attempts"], shown["losses"], shown["error"]) == (1, 0, None)

    # The file is the examples in chat JSONL, the agent's system prompt first in each.
    content = (await standins.admin.get(f"/v1/files/{file_id}/content")).content
    triage = load(Settings().agents).get("triage")
    assert triage is not None
    assert content == training_file.training_jsonl(EXAMPLES, triage.system_prompt)
    assert [json.loads(line)["messages"][0] for line in content.splitlines()] == [
        {"role": "system", "content": triage.system_prompt}
    ] * len(EXAMPLES)

    # Sent by this process, through the official client with the process's User-Agent.
    clients = await read_rows(db_url, "SELECT client FROM standin.writes WHERE vendor = 'openai'")
    assert {c["client"] for c in clients} == {clients[0]["client"]}
    assert f"pid/{os.getpid()}" in clients[0]["client"] and clients[0]["client"].startswith("ticketiq/")


async def test_bad_params_are_refused_naming_the_field_and_nothing_is_written(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    refused = [
        ({"training": {"examples": EXAMPLES}}, ["body", "params", "model"]),
        ({"model": BASE}, ["body", "params", "training"]),
        ({"model": BASE, "training": {"examples": EXAMPLES[:3]}}, ["body", "params", "training", "examples"]),
        (
            {"model": BASE, "training": {"examples": [*EXAMPLES, {"messages": [{"role": "bot", "content": "x"}]}]}},
            ["body", "params", "training", "examples", "12", "messages", "0", "role"],
        ),
        ({"model": BASE, "training": {"examples": EXAMPLES, "agent": "nobody"}},
         ["body", "params", "training", "agent"]),
        ({"model": BASE, "training": {"knowledge": {"project": "ops"}}},
         ["body", "params", "training", "knowledge", "project"]),
        ({"model": BASE, "training": {"examples": EXAMPLES}, "suffix": "a:b"}, ["body", "params", "suffix"]),
        ({"model": BASE, "training": {"examples": EXAMPLES}, "poll_s": -1}, ["body", "params", "poll_s"]),
    ]  # fmt: skip
    async with app_process(standins, tmp_path) as process, api(process) as client:
        for params, loc in refused:
            answer = await client.post("/v1/jobs", json={"kind": "fine_tune", "params": params})
            assert answer.status_code == 422, (params, answer.text)
            assert answer.json()["detail"][0]["loc"] == loc, answer.json()
    assert await read_rows(db_url, "SELECT id FROM jobs") == []
    assert await standins.writes(vendor="openai") == []


async def test_a_create_in_doubt_is_found_by_its_metadata_and_not_created_again(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    """A 500 after the create was applied: the remote job exists, the answer did not say so. Once the
    create can no longer be in flight (I14), the job lists remote jobs by its key, finds it and follows
    it: one remote job, created once."""
    await standins.fault("openai", "500_after_apply", operation="create_fine_tuning_job")
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client)
        row = await ends(db_url, job_id)
    assert row["status"] == "succeeded", row["error"]
    made = await creates(standins, job_id)
    assert [w["effect"] for w in made] == ["applied"]  # sent once, never again
    assert row["result"]["remote_job"] == made[0]["ref"]
    assert (row["attempt"], row["losses"]) == (1, 0)
    assert "create" not in row["state"]  # the mark was settled
    assert row["state"]["remote"] == {"id": made[0]["ref"], "status": "succeeded"}


async def test_a_create_refused_before_it_was_applied_is_created_once_after_the_look(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    """A 500 before the create was applied: in doubt all the same; the look finds nothing, so it is
    created once more, and only once."""
    await standins.fault("openai", "500", operation="create_fine_tuning_job")
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client)
        row = await ends(db_url, job_id)
    assert row["status"] == "succeeded", row["error"]
    made = await creates(standins, job_id)
    assert [w["effect"] for w in made] == ["refused", "applied"]
    assert row["result"]["remote_job"] == made[1]["ref"]


async def test_an_upload_in_doubt_is_found_by_its_file_name_and_not_uploaded_again(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    await standins.fault("openai", "500_after_apply", operation="upload_file")
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client)
        row = await ends(db_url, job_id)
    assert row["status"] == "succeeded", row["error"]
    files = await uploads(standins, job_id)
    assert [w["effect"] for w in files] == ["applied"]
    assert row["result"]["training_file"] == files[0]["ref"]
    assert len(applied(await creates(standins, job_id))) == 1


async def test_a_refused_create_fails_the_job_with_the_reason(standins: Standins, tmp_path: Path, db_url: str) -> None:
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client, model="gpt-2-nonesuch")
        row = await ends(db_url, job_id)
    assert row["status"] == "failed"
    assert "create was refused: 400 Model gpt-2-nonesuch is not available for fine-tuning" in row["error"]
    assert [w["effect"] for w in await creates(standins, job_id)] == ["refused"]  # not sent again


async def test_a_remote_failure_fails_the_job_with_its_error(standins: Standins, tmp_path: Path, db_url: str) -> None:
    await standins.options(fine_tune_failure="The training run diverged.")
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client)
        row = await ends(db_url, job_id)
    assert row["status"] == "failed"
    remote_id = applied(await creates(standins, job_id))[0]["ref"]
    assert row["error"] == f"the fine-tuning job {remote_id} failed (server_error: The training run diverged.)"


async def test_a_cancelled_job_cancels_its_remote_job(standins: Standins, tmp_path: Path, db_url: str) -> None:
    await standins.options(fine_tune_duration_s=600)
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client)

        async def polled() -> bool:
            return ((await job_row(db_url, job_id))["state"].get("remote") or {}).get("status") is not None

        await eventually(polled, 30, "the remote job being followed")
        assert (await client.post(f"/v1/jobs/{job_id}/cancel")).status_code == 202
        row = await ends(db_url, job_id)
    assert row["status"] == "cancelled"
    remote_id = applied(await creates(standins, job_id))[0]["ref"]
    cancels = await standins.writes(vendor="openai", operation="cancel_fine_tuning_job", target=remote_id)
    assert [w["effect"] for w in cancels] == ["applied"]
    assert (await remote(standins, remote_id))["status"] == "cancelled"


async def test_a_resume_with_the_remote_id_recorded_follows_it_without_creating(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    await standins.options(fine_tune_duration_s=600)
    async with (
        app_process(standins, tmp_path, "a", lead=False),
        app_process(standins, tmp_path, "b", lead=True) as b,
        api(b) as client,
    ):
        job_id = await post_fine_tune(client)

        async def recorded() -> bool:
            return bool(((await job_row(db_url, job_id))["state"].get("remote") or {}).get("id"))

        await eventually(recorded, 30, "the remote job's id being recorded")
        first = await job_row(db_url, job_id)
        await kill_liveness(db_url, first["holder"])

        async def taken_on() -> bool:
            return int((await job_row(db_url, job_id))["attempt"]) >= 2

        await eventually(taken_on, 60, "another attempt taking the job on")
        remote_id = first["state"]["remote"]["id"]
        (await standins.admin.post(f"/_standin/fine_tuning/jobs/{remote_id}/finish")).raise_for_status()
        row = await ends(db_url, job_id)
    assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), row["error"]
    assert row["result"]["remote_job"] == remote_id
    # Taken on under a new attempt: by the other process, or by the same one once it took its mark again.
    assert row["attempt"] > first["attempt"]
    assert [w["ref"] for w in applied(await creates(standins, job_id))] == [remote_id]  # created once
    assert len(applied(await uploads(standins, job_id))) == 1


async def put_knowledge(db_url: str, project: str, count: int) -> list[dict[str, Any]]:
    issues = [
        {"key": f"{project}-{n}", "title": f"Issue {n}", "body": f"Body {n}", "labels": ["ops", f"t{n % 3}"]}
        for n in range(1, count + 1)
    ]
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        for issue in issues:
            await conn.execute(
                "INSERT INTO knowledge (source, key, project, title, body, labels) VALUES ('jira', %s, %s, %s, %s, %s)",
                (issue["key"], project, issue["title"], issue["body"], issue["labels"]),
            )
    return sorted(issues, key=lambda i: str(i["key"]))


async def test_the_knowledge_table_is_a_source_of_examples(standins: Standins, tmp_path: Path, db_url: str) -> None:
    issues = await put_knowledge(db_url, "OPS", 11)
    await put_knowledge(db_url, "FEW", 4)
    async with app_process(standins, tmp_path) as process, api(process) as client:
        job_id = await post_fine_tune(client, training={"knowledge": {"project": "OPS"}})
        few_id = await post_fine_tune(client, training={"knowledge": {"project": "FEW"}})
        row, few = await ends(db_url, job_id), await ends(db_url, few_id)
    assert row["status"] == "succeeded", row["error"]
    file_id = row["result"]["training_file"]
    content = (await standins.admin.get(f"/v1/files/{file_id}/content")).content
    assert content == training_file.training_jsonl(training_file.knowledge_examples(issues))
    assert (few["status"], few["error"]) == (
        "failed", "the knowledge of project FEW gave only 4 usable examples; OpenAI trains on 10 or more",
    )  # fmt: skip
    assert await uploads(standins, few_id) == []  # nothing sent


async def test_the_in_doubt_mark_waiting_on_a_takeover_matches_nothing_and_nothing_is_sent(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    """I3 for the mark: the job reads its examples, then marks its upload in doubt; that mark waits on
    the row lock of a concurrent takeover, which raises the attempt and commits. The mark matches
    nothing, the job stops, and the upload is never sent."""
    await put_knowledge(db_url, "OPS", 10)
    async with app_process(standins, tmp_path, lead=False) as process, api(process) as client:
        async with (
            await psycopg.AsyncConnection.connect(db_url) as examples_held,
            await psycopg.AsyncConnection.connect(db_url) as takeover,
        ):
            async with examples_held.transaction():
                await examples_held.execute("LOCK TABLE knowledge IN ACCESS EXCLUSIVE MODE")
                job_id = await post_fine_tune(client, training={"knowledge": {"project": "OPS"}})
                await eventually(lambda: waits_on_lock(db_url, "FROM knowledge"), 30, "the job reading its examples")
                await takeover.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
            # The examples are read; the job's next statement is the mark, which waits on the takeover.
            await eventually(lambda: waits_on_lock(db_url, "in_flight_until"), 30, "the mark waiting on the takeover")
            await takeover.execute("UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", (job_id,))
            await takeover.commit()

        async def stopped() -> bool:
            return job_id not in process.jobs.slots

        await eventually(stopped, 30, "the fenced job stopping")
        row = await job_row(db_url, job_id)
    assert (row["status"], row["attempt"], row["state"]) == ("running", 2, {})  # the mark wrote nothing
    assert await uploads(standins, job_id) == []  # and nothing was sent


async def waits_on_lock(db_url: str, text: str) -> bool:
    """Whether a statement holding `text` waits on a lock right now."""
    rows = await read_rows(
        db_url,
        "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        f"%{text}%",
    )
    return bool(rows)


async def test_a_job_taken_over_while_it_waits_out_an_upload_in_doubt_sends_nothing_more(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    """I3, I14: the upload was answered 500, so it is in doubt and the job waits out its window by the
    fenced database clock. Its attempt is raised meanwhile: its next fenced statement (the clock, or a
    mark once it looked) matches nothing, the job stops, and no upload is sent again."""
    await standins.fault("openai", "500", operation="upload_file")
    async with app_process(standins, tmp_path, lead=False, write_budget_s=3.0) as process, api(process) as client:
        job_id = await post_fine_tune(client)

        async def refused() -> bool:
            return [w["effect"] for w in await uploads(standins, job_id)] == ["refused"]

        await eventually(refused, 30, "the upload answered 500")
        await read_rows(db_url, "UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", job_id)

        async def stopped() -> bool:
            return job_id not in process.jobs.slots

        await eventually(stopped, 30, "the fenced job stopping")
        row = await job_row(db_url, job_id)
    assert (row["status"], row["attempt"]) == ("running", 2)
    assert list(row["state"]) == ["upload"]  # still the first attempt's mark: nothing written since
    assert [w["effect"] for w in await uploads(standins, job_id)] == ["refused"]  # not sent again
    assert await creates(standins, job_id) == []


async def test_a_remote_job_that_does_not_answer_while_followed_is_asked_again(
    standins: Standins, tmp_path: Path, db_url: str
) -> None:
    """Following is patient: the remote job trains on whether or not a look at it is answered."""
    await standins.fault("openai", "500", operation="get_fine_tuning_job", count=4)
    async with app_process(standins, tmp_path, model_max_retries=1) as process, api(process) as client:
        job_id = await post_fine_tune(client)
        row = await ends(db_url, job_id)
    assert row["status"] == "succeeded", row["error"]
    assert (await standins.admin.get("/_standin/faults")).json() == []  # every refusal was met, and outlasted
    assert len(applied(await creates(standins, job_id))) == 1
