"""The OpenAI files and fine-tuning stand-in, spoken to by the official `openai` client over a real
socket: uploads and creates land once each in the write log with the client's User-Agent, jobs are
found again by their metadata, run their course to a fine-tuned model, fail or are cancelled as
OpenAI's are, and injected faults (a 500 after the create was applied) behave as the stand-ins' do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import psycopg
import pytest
from openai.types.fine_tuning import FineTuningJob

from tests.support.http import TLS
from tests.support.standins import Standins

EXAMPLE = {"messages": [{"role": "user", "content": "Login fails"}, {"role": "assistant", "content": "auth"}]}
TRAINING = b"".join(json.dumps(EXAMPLE).encode() + b"\n" for _ in range(12))
BASE = "gpt-4o-mini-2024-07-18"
AGENT = "ticketiq-test/1 pid/4242"


@pytest.fixture
async def client(standins: Standins) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{standins.base_url}/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"User-Agent": AGENT},
        http_client=openai.DefaultAsyncHttpxClient(verify=TLS),  # the tests' one TLS context (tests/support/http.py)
    ) as api:
        yield api


async def upload(client: openai.AsyncOpenAI, name: str = "train.jsonl", content: bytes = TRAINING) -> str:
    made = await client.files.create(file=(name, content, "application/jsonl"), purpose="fine-tune")
    return made.id


async def ended(client: openai.AsyncOpenAI, job_id: str) -> FineTuningJob:
    """The job once it ended, looked at as a client polls it."""
    while True:
        job = await client.fine_tuning.jobs.retrieve(job_id)
        if job.status in ("succeeded", "failed", "cancelled"):
            return job
        await asyncio.sleep(0.05)


async def test_an_upload_is_a_file_listed_read_back_and_recorded_once(
    client: openai.AsyncOpenAI, standins: Standins
) -> None:
    file = await client.files.create(file=("train-1.jsonl", TRAINING, "application/jsonl"), purpose="fine-tune")
    assert (file.object, file.filename, file.purpose, file.bytes) == (
        "file",
        "train-1.jsonl",
        "fine-tune",
        len(TRAINING),
    )
    other = await upload(client, "train-2.jsonl")
    listed = [f.filename async for f in client.files.list(purpose="fine-tune")]
    assert listed == ["train-2.jsonl", "train-1.jsonl"]  # newest first, as OpenAI lists them
    page = await client.files.list(purpose="fine-tune", order="asc", limit=1)
    assert ([f.id for f in page.data], page.has_more) == ([file.id], True)
    assert [f.id async for f in client.files.list(purpose="batch")] == []
    assert (await client.files.retrieve(other)).filename == "train-2.jsonl"
    assert (await client.files.content(file.id)).content == TRAINING

    writes = await standins.writes(vendor="openai", operation="upload_file")
    assert [(w["key"], w["effect"], w["ref"]) for w in writes] == [
        ("train-1.jsonl", "applied", file.id),
        ("train-2.jsonl", "applied", other),
    ]
    assert writes[0]["body"] == {"filename": "train-1.jsonl", "purpose": "fine-tune", "bytes": len(TRAINING)}


async def test_a_job_runs_its_course_to_a_fine_tuned_model(client: openai.AsyncOpenAI, standins: Standins) -> None:
    await standins.options(fine_tune_duration_s=0.3)
    training = await upload(client)
    job = await client.fine_tuning.jobs.create(
        model=BASE, training_file=training, suffix="triage", metadata={"ticketiq_job": "job-1"}
    )
    assert (job.object, job.status, job.fine_tuned_model, job.finished_at) == (
        "fine_tuning.job", "validating_files", None, None,
    )  # fmt: skip
    assert (job.model, job.training_file, job.metadata) == (BASE, training, {"ticketiq_job": "job-1"})
    done = await ended(client, job.id)
    assert done.status == "succeeded"
    assert done.fine_tuned_model == f"ft:{BASE}:ticketiq:triage:{job.id.removeprefix('ftjob-')[:8]}"
    assert done.finished_at is not None
    assert done.finished_at >= done.created_at
    assert done.error is None
    assert done.trained_tokens


async def test_jobs_are_found_again_by_their_metadata(client: openai.AsyncOpenAI, standins: Standins) -> None:
    await standins.options(fine_tune_duration_s=600)
    training = await upload(client)
    mine = await client.fine_tuning.jobs.create(model=BASE, training_file=training, metadata={"ticketiq_job": "a"})
    await client.fine_tuning.jobs.create(model=BASE, training_file=training, metadata={"ticketiq_job": "b"})
    await client.fine_tuning.jobs.create(model=BASE, training_file=training)
    found = [j.id async for j in client.fine_tuning.jobs.list(metadata={"ticketiq_job": "a"})]
    assert found == [mine.id]
    assert [j.id async for j in client.fine_tuning.jobs.list(metadata={"ticketiq_job": "c"})] == []
    every = [j async for j in client.fine_tuning.jobs.list(limit=2)]  # pages of two, followed by `after`
    assert len(every) == 3
    assert every[-1].id == mine.id  # newest first

    creates = await standins.writes(vendor="openai", operation="create_fine_tuning_job", key="ticketiq_job=a")
    assert [(w["effect"], w["ref"]) for w in creates] == [("applied", mine.id)]
    raw = await standins.admin.get("/v1/fine_tuning/jobs", params={"metadata": "null"})
    assert [j["metadata"] for j in raw.json()["data"]] == [None]


async def test_a_job_that_cannot_train_fails_with_openais_error(client: openai.AsyncOpenAI, standins: Standins) -> None:
    await standins.options(fine_tune_duration_s=0.3)
    short = await upload(client, "short.jsonl", TRAINING.split(b"\n", 1)[1][: -len(TRAINING) // 2])
    failed = await ended(client, (await client.fine_tuning.jobs.create(model=BASE, training_file=short)).id)
    assert failed.status == "failed"
    assert failed.fine_tuned_model is None
    assert failed.error is not None
    assert failed.error.code == "invalid_training_file"

    await standins.options(fine_tune_failure="The training run diverged.")
    broken = await ended(
        client, (await client.fine_tuning.jobs.create(model=BASE, training_file=await upload(client))).id
    )
    assert (broken.status, broken.error and broken.error.message) == ("failed", "The training run diverged.")
    await standins.options(fine_tune_failure="")
    fine = await ended(
        client, (await client.fine_tuning.jobs.create(model=BASE, training_file=await upload(client))).id
    )
    assert fine.status == "succeeded"


async def test_a_running_job_is_cancelled_once(client: openai.AsyncOpenAI, standins: Standins) -> None:
    await standins.options(fine_tune_duration_s=600)
    job = await client.fine_tuning.jobs.create(model=BASE, training_file=await upload(client))
    cancelled = await client.fine_tuning.jobs.cancel(job.id)
    assert cancelled.status == "cancelled"
    assert cancelled.finished_at is not None
    assert (await client.fine_tuning.jobs.retrieve(job.id)).status == "cancelled"
    with pytest.raises(openai.BadRequestError):
        await client.fine_tuning.jobs.cancel(job.id)
    with pytest.raises(openai.NotFoundError):
        await client.fine_tuning.jobs.cancel("ftjob-nothing")
    cancels = await standins.writes(vendor="openai", operation="cancel_fine_tuning_job", target=job.id)
    assert [w["effect"] for w in cancels] == ["applied", "refused"]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"model": "gpt-5-nonexistent"}, "model"),
        ({"training_file": "file-missing"}, "training_file"),
        ({"suffix": "x" * 65}, "suffix"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
    ],
)
async def test_a_create_openai_would_refuse_is_refused_in_its_shape(
    client: openai.AsyncOpenAI, standins: Standins, fields: dict[str, Any], param: str
) -> None:
    body: dict[str, Any] = {"model": BASE, "training_file": await upload(client), **fields}
    with pytest.raises(openai.BadRequestError) as refused:
        await client.fine_tuning.jobs.create(**body)
    assert refused.value.param == param
    assert refused.value.type == "invalid_request_error"
    writes = await standins.writes(vendor="openai", operation="create_fine_tuning_job")
    assert [w["effect"] for w in writes] == ["refused"]


async def test_uploads_openai_would_refuse_are_refused(client: openai.AsyncOpenAI, standins: Standins) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await client.files.create(file=("train.txt", TRAINING, "text/plain"), purpose="fine-tune")
    assert refused.value.param == "file"
    batch = await client.files.create(file=("batch.jsonl", TRAINING, "application/jsonl"), purpose="batch")
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        await client.fine_tuning.jobs.create(model=BASE, training_file=batch.id)
    assert wrong_purpose.value.param == "training_file"
    async with httpx.AsyncClient(verify=TLS, base_url=standins.base_url) as bare:  # no API key
        answer = await bare.post("/v1/files", files={"file": ("t.jsonl", TRAINING)}, data={"purpose": "fine-tune"})
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "invalid_request_error"


async def test_each_write_is_recorded_with_the_clients_user_agent(
    client: openai.AsyncOpenAI, standins: Standins, db_url: str
) -> None:
    training = await upload(client)
    await client.fine_tuning.jobs.create(model=BASE, training_file=training, metadata={"ticketiq_job": "ua"})
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        cur = await conn.execute("SELECT operation, client FROM standin.writes WHERE vendor = 'openai' ORDER BY id")
        rows = await cur.fetchall()
    assert rows == [("upload_file", AGENT), ("create_fine_tuning_job", AGENT)]


async def test_a_create_answered_500_after_it_was_applied_exists_all_the_same(
    client: openai.AsyncOpenAI, standins: Standins
) -> None:
    training = await upload(client)
    await standins.fault("openai", "500_after_apply", operation="create_fine_tuning_job")
    with pytest.raises(openai.InternalServerError) as failed:
        await client.fine_tuning.jobs.create(model=BASE, training_file=training, metadata={"ticketiq_job": "doubt"})
    assert failed.value.type == "server_error"
    found = [j async for j in client.fine_tuning.jobs.list(metadata={"ticketiq_job": "doubt"})]
    assert len(found) == 1
    writes = await standins.writes(vendor="openai", operation="create_fine_tuning_job", key="ticketiq_job=doubt")
    assert [(w["effect"], w["ref"]) for w in writes] == [("applied", found[0].id)]

    await standins.fault("openai", "500", operation="list_fine_tuning_jobs")
    with pytest.raises(openai.InternalServerError):
        await client.fine_tuning.jobs.list(metadata={"ticketiq_job": "doubt"})
    await standins.fault("openai", "500", operation="create_fine_tuning_job")
    with pytest.raises(openai.InternalServerError):
        await client.fine_tuning.jobs.create(model=BASE, training_file=training, metadata={"ticketiq_job": "doubt"})
    assert len([j async for j in client.fine_tuning.jobs.list(metadata={"ticketiq_job": "doubt"})]) == 1  # not applied


async def test_an_admin_finish_ends_a_running_job_at_once(client: openai.AsyncOpenAI, standins: Standins) -> None:
    await standins.options(fine_tune_duration_s=600)
    training = await upload(client)
    job = await client.fine_tuning.jobs.create(model=BASE, training_file=training)
    finished = await standins.admin.post(f"/_standin/fine_tuning/jobs/{job.id}/finish")
    assert finished.status_code == 200, finished.text
    assert (await client.fine_tuning.jobs.retrieve(job.id)).status == "succeeded"
    assert (await standins.admin.post(f"/_standin/fine_tuning/jobs/{job.id}/finish")).status_code == 400

    other = await client.fine_tuning.jobs.create(model=BASE, training_file=training)
    await standins.admin.post(f"/_standin/fine_tuning/jobs/{other.id}/finish", json={"failure": "Out of capacity."})
    failed = await client.fine_tuning.jobs.retrieve(other.id)
    assert (failed.status, failed.error and failed.error.message) == ("failed", "Out of capacity.")
