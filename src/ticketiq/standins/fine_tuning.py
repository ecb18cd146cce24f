"""OpenAI's files and fine-tuning API, as far as the stand-in speaks it (mounted beside the model).

    POST /v1/files                          multipart `file` + `purpose`: a `file` object
    GET  /v1/files                          `purpose`, `order` (desc), `limit` (10,000), `after`
    GET  /v1/files/{id}, /v1/files/{id}/content
    POST /v1/fine_tuning/jobs               `model`, `training_file`, `suffix`, `metadata`, ...
    GET  /v1/fine_tuning/jobs               newest first; `after`, `limit` (20), `metadata[k]=v`
    GET  /v1/fine_tuning/jobs/{id}
    POST /v1/fine_tuning/jobs/{id}/cancel

A job keeps no timer: its status is a function of how long ago it was created, on the database clock
(`timeline`), against the duration it was given at create (the stand-in option
`fine_tune_duration_s`). It is `validating_files` for the first tenth of that time, `queued` for the
next, then `running`, then `succeeded` with `fine_tuned_model` `ft:<base>:ticketiq:<suffix>:<tail>`;
or `failed` once validated when its training file is not chat-format JSONL with at least 10 examples,
or when the option `fine_tune_failure` held a message at its create. Uploads, creates and cancels are
writes: recorded in `standin.writes` (vendor `openai`, with the client's User-Agent) and subject to the
stand-ins' faults (`/_standin/faults`, vendor `openai`, operations `upload_file`,
`create_fine_tuning_job`, `cancel_fine_tuning_job`, and the reads `list_files`, `get_file`,
`list_fine_tuning_jobs`, `get_fine_tuning_job`). `POST /_standin/fine_tuning/jobs/{id}/finish` ends a
running job at once (succeeded, or failed with `{"failure": "why"}`), so a test need not wait it out.
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from ticketiq.standins.records import Answer, Effect, Row, Session, Write
from ticketiq.standins.vendors.intake import IntakeDep, has_auth, json_body, respond

VENDOR = "openai"
ORGANIZATION = "ticketiq"
# Base models the stand-in fine-tunes (OpenAI's fine-tunable snapshots and aliases); a fine-tuned
# model (`ft:...`) may be trained further, as OpenAI allows.
FINE_TUNABLE = frozenset({
    "gpt-4o-mini-2024-07-18", "gpt-4o-mini", "gpt-4o-2024-08-06", "gpt-4.1-2025-04-14",
    "gpt-4.1-mini-2025-04-14", "gpt-4.1-nano-2025-04-14", "gpt-3.5-turbo", "gpt-3.5-turbo-0125",
})  # fmt: skip
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
MIN_EXAMPLES = 10  # OpenAI's floor for a training file
EPOCHS = 3  # what "auto" comes to for a small file
METADATA_PAIRS, METADATA_KEY_CHARS, METADATA_VALUE_CHARS = 16, 64, 512
SUFFIX_CHARS = 64
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_ID_CHARS = string.ascii_letters + string.digits


class Status(StrEnum):
    VALIDATING_FILES = "validating_files"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Moment:
    """Where a job stands `elapsed_s` after its create: its status, and when it ended (seconds after
    its create) or None while it runs."""

    status: Status
    finished_after_s: float | None


def timeline(elapsed_s: float, duration_s: float, fails: bool, cancelled_after_s: float | None) -> Moment:
    """A job's status as a function of time: validating for the first tenth of its duration, queued for
    the next, running until the duration is over; a job that fails does so once validated; a cancel
    before the end stops it where it was."""
    validated, started = 0.1 * duration_s, 0.2 * duration_s
    ends_after = validated if fails else duration_s
    if cancelled_after_s is not None and cancelled_after_s < ends_after and cancelled_after_s <= elapsed_s:
        return Moment(Status.CANCELLED, cancelled_after_s)
    if elapsed_s >= ends_after:
        return Moment(Status.FAILED if fails else Status.SUCCEEDED, ends_after)
    if elapsed_s < validated:
        return Moment(Status.VALIDATING_FILES, None)
    return Moment(Status.QUEUED if elapsed_s < started else Status.RUNNING, None)


def training_problem(content: bytes) -> tuple[int, dict[str, Any] | None]:
    """(examples, None) for a chat-format JSONL training file OpenAI would train on, else (examples
    read, the job's `error` object saying why not)."""

    def bad(message: str) -> dict[str, Any]:
        return {"code": "invalid_training_file", "message": message, "param": "training_file"}

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return 0, bad("The training file is not UTF-8 encoded.")
    examples = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            example = json.loads(line)
        except json.JSONDecodeError:
            return examples, bad(f"Line {number} of the training file is not valid JSON.")
        messages = example.get("messages") if isinstance(example, dict) else None
        if not isinstance(messages, list) or not messages:
            return examples, bad(f"Line {number}: each example must have a non-empty `messages` list.")
        for message in messages:
            if not isinstance(message, dict) or message.get("role") not in _ROLES:
                return examples, bad(f"Line {number}: a message has no valid role.")
        if not any(m.get("role") == "assistant" for m in messages):
            return examples, bad(f"Line {number}: an example needs at least one assistant message.")
        examples += 1
    if examples < MIN_EXAMPLES:
        return examples, bad(
            f"Training file has {examples} example(s), but must have at least {MIN_EXAMPLES} examples."
        )
    return examples, None


def fine_tuned_name(model: str, suffix: str | None, job_id: str) -> str:
    base = model.split(":")[1] if model.startswith("ft:") else model
    return f"ft:{base}:{ORGANIZATION}:{suffix or ''}:{job_id.removeprefix('ftjob-')[:8]}"


def metadata_key(metadata: dict[str, str] | None) -> str | None:
    """What a create is recorded under in the write log: its metadata as `k=v&...`, sorted."""
    if not metadata:
        return None
    return "&".join(f"{k}={metadata[k]}" for k in sorted(metadata))


def metadata_filter(query: list[tuple[str, str]]) -> dict[str, str] | None:
    """The `metadata[k]=v` pairs of a list request's query (None: no filter)."""
    pairs = {k[len("metadata[") : -1]: v for k, v in query if k.startswith("metadata[") and k.endswith("]")}
    return pairs or None


# --- HTTP ----------------------------------------------------------------------------------------


def router() -> APIRouter:
    api = APIRouter()

    @api.post("/v1/files")
    async def upload(request: Request, intake: IntakeDep) -> Response:
        authed = has_auth(request)
        unreadable: str | None = None
        file: Any = None
        purpose: Any = None
        content, filename = b"", ""
        try:
            async with request.form() as form:  # closes the parts' spooled files
                file, purpose = form.get("file"), form.get("purpose")
                if isinstance(file, UploadFile):
                    content, filename = await file.read(), file.filename or "file"
        except (HTTPException, AssertionError, ValueError) as exc:  # not a well-formed multipart body
            unreadable = f"Could not parse multipart form: {exc}"
        record = {"filename": filename, "purpose": purpose, "bytes": len(content)}
        write = Write(VENDOR, "upload_file", "files", filename or None, record)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _no_key()
            if unreadable is not None:
                return _invalid(unreadable, None)
            if not isinstance(file, UploadFile):
                return _invalid("Missing required parameter: 'file'.", "file", "missing_required_parameter")
            if not isinstance(purpose, str) or purpose not in PURPOSES:
                return _invalid(f"'{purpose}' is not one of {sorted(PURPOSES)} - 'purpose'", "purpose")
            if purpose == "fine-tune" and not filename.endswith(".jsonl"):
                return _invalid("Invalid file format for Fine-Tuning API. Must be .jsonl", "file")
            row = await session.fetch_one(
                "standin.openai_file_insert",
                {"id": _new_id("file-"), "filename": filename, "purpose": purpose, "content": content},
            )
            assert row is not None
            return Answer(200, file_object(row), Effect.APPLIED, row["id"])

        return await intake.write(write, apply)

    @api.get("/v1/files")
    async def list_files(request: Request, intake: IntakeDep) -> Response:
        query = request.query_params

        async def answer() -> Answer:
            try:
                limit = int(query.get("limit", "10000"))
            except ValueError:
                limit = 0
            if not 1 <= limit <= 10000:
                return _invalid("limit must be between 1 and 10000", "limit")
            order = query.get("order", "desc")
            if order not in ("asc", "desc"):
                return _invalid("order must be one of asc, desc", "order")
            rows = await intake.store.fetch_all(
                "standin.openai_file_list",
                {"purpose": query.get("purpose"), "after": query.get("after"), "asc": order == "asc",
                 "limit": limit + 1},
            )  # fmt: skip
            return Answer(200, _page([file_object(r) for r in rows], limit, with_ends=True))

        return await intake.read(VENDOR, "list_files", answer)

    @api.get("/v1/files/{file_id}")
    async def get_file(file_id: str, intake: IntakeDep) -> Response:
        async def answer() -> Answer:
            row = await intake.store.fetch_one("standin.openai_file_get", {"id": file_id})
            return _missing_file(file_id) if row is None else Answer(200, file_object(row))

        return await intake.read(VENDOR, "get_file", answer)

    @api.get("/v1/files/{file_id}/content")
    async def file_content(file_id: str, intake: IntakeDep) -> Response:
        row = await intake.store.fetch_one("standin.openai_file_get", {"id": file_id})
        if row is None:
            return respond(_missing_file(file_id))
        return Response(bytes(row["content"]), media_type="application/octet-stream")

    @api.post("/v1/fine_tuning/jobs")
    async def create_job(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        key = metadata_key(metadata) if _is_metadata(metadata) else None
        write = Write(VENDOR, "create_fine_tuning_job", "fine_tuning/jobs", key, body)
        authed = has_auth(request)
        duration_s, failure = intake.options.fine_tune_duration_s, intake.options.fine_tune_failure

        async def apply(session: Session) -> Answer:
            if not authed:
                return _no_key()
            problem = _create_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            training = await session.fetch_one("standin.openai_file_get", {"id": body["training_file"]})
            if training is None:
                return _invalid(f"invalid training_file: {body['training_file']}", "training_file")
            if training["purpose"] != "fine-tune":
                return _invalid(
                    f"File {training['id']} has purpose '{training['purpose']}'; a training file must have "
                    "purpose 'fine-tune'.",
                    "training_file",
                )
            examples, error = training_problem(bytes(training["content"]))
            if error is None and failure:
                error = {"code": "server_error", "message": failure, "param": None}
            job_id = _new_id("ftjob-", 24)
            row = await session.fetch_one(
                "standin.fine_tuning_job_insert",
                {
                    "id": job_id,
                    "model": body["model"],
                    "training_file": training["id"],
                    "validation_file": body.get("validation_file"),
                    "suffix": body.get("suffix"),
                    "metadata": json.dumps(metadata) if metadata else None,
                    "seed": body.get("seed") if isinstance(body.get("seed"), int) else secrets.randbelow(2**31),
                    "duration_s": duration_s,
                    "failure": json.dumps(error) if error else None,
                    "examples": examples,
                    "fine_tuned_model": fine_tuned_name(body["model"], body.get("suffix"), job_id),
                },
            )
            assert row is not None
            return Answer(200, job_object(row), Effect.APPLIED, job_id)

        return await intake.write(write, apply)

    @api.get("/v1/fine_tuning/jobs")
    async def list_jobs(request: Request, intake: IntakeDep) -> Response:
        query = request.query_params

        async def answer() -> Answer:
            try:
                limit = int(query.get("limit", "20"))
            except ValueError:
                limit = 0
            if not 1 <= limit <= 100:
                return _invalid("limit must be between 1 and 100", "limit")
            wanted = metadata_filter(list(query.multi_items()))
            rows = await intake.store.fetch_all(
                "standin.fine_tuning_job_list",
                {
                    "after": query.get("after"),
                    "metadata": json.dumps(wanted) if wanted else None,
                    "no_metadata": query.get("metadata") == "null",
                    "limit": limit + 1,
                },
            )
            return Answer(200, _page([job_object(r) for r in rows], limit, with_ends=False))

        return await intake.read(VENDOR, "list_fine_tuning_jobs", answer)

    @api.get("/v1/fine_tuning/jobs/{job_id}")
    async def get_job(job_id: str, intake: IntakeDep) -> Response:
        async def answer() -> Answer:
            row = await intake.store.fetch_one("standin.fine_tuning_job_get", {"id": job_id})
            return _missing_job(job_id) if row is None else Answer(200, job_object(row))

        return await intake.read(VENDOR, "get_fine_tuning_job", answer)

    @api.post("/v1/fine_tuning/jobs/{job_id}/cancel")
    async def cancel_job(job_id: str, request: Request, intake: IntakeDep) -> Response:
        write = Write(VENDOR, "cancel_fine_tuning_job", job_id, None, {})
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _no_key()
            row = await session.fetch_one("standin.fine_tuning_job_lock", {"id": job_id})
            if row is None:
                return _missing_job(job_id)
            if _moment(row).finished_after_s is not None:
                return _invalid(f"Job {job_id} has already {_moment(row).status.value}; it cannot be cancelled.", None)
            row = await session.fetch_one("standin.fine_tuning_job_cancel", {"id": job_id})
            assert row is not None
            return Answer(200, job_object(row), Effect.APPLIED, job_id)

        return await intake.write(write, apply)

    @api.post("/_standin/fine_tuning/jobs/{job_id}/finish")
    async def finish_job(job_id: str, request: Request, intake: IntakeDep) -> Response:
        """Admin: a job still running ends now: succeeded, or failed with `{"failure": "why"}`."""
        body = await json_body(request) if await request.body() else {}
        failure = body.get("failure") if isinstance(body, dict) else None
        error = {"code": "server_error", "message": failure, "param": None} if isinstance(failure, str) else None
        row = await intake.store.fetch_one(
            "standin.fine_tuning_job_finish", {"id": job_id, "failure": json.dumps(error) if error else None}
        )
        if row is None:
            return respond(_invalid(f"No running job {job_id} to finish.", None))
        return respond(Answer(200, job_object(row)))

    return api


# --- objects -------------------------------------------------------------------------------------


def file_object(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "object": "file",
        "bytes": row["bytes"],
        "created_at": int(row["created_epoch"]),
        "filename": row["filename"],
        "purpose": row["purpose"],
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


def _moment(row: Row) -> Moment:
    return timeline(row["elapsed_s"], row["duration_s"], row["failure"] is not None, row["cancelled_after_s"])


def job_object(row: Row) -> dict[str, Any]:
    moment = _moment(row)
    created = int(row["created_epoch"])
    ended = moment.finished_after_s
    succeeded = moment.status is Status.SUCCEEDED
    return {
        "id": row["id"],
        "object": "fine_tuning.job",
        "created_at": created,
        "error": row["failure"] if moment.status is Status.FAILED else None,
        "estimated_finish": None if ended is not None else int(row["created_epoch"] + row["duration_s"]),
        "fine_tuned_model": row["fine_tuned_model"] if succeeded else None,
        "finished_at": None if ended is None else int(row["created_epoch"] + ended),
        "hyperparameters": {"batch_size": 1, "learning_rate_multiplier": 1.8, "n_epochs": EPOCHS},
        "integrations": [],
        "metadata": row["metadata"],
        "method": {
            "type": "supervised",
            "supervised": {"hyperparameters": {"batch_size": 1, "learning_rate_multiplier": 1.8, "n_epochs": EPOCHS}},
        },
        "model": row["model"],
        "organization_id": f"org-{ORGANIZATION}",
        "result_files": [],
        "seed": row["seed"],
        "status": moment.status.value,
        "suffix": row["suffix"],
        "trained_tokens": row["examples"] * EPOCHS * 64 if succeeded else None,
        "training_file": row["training_file"],
        "validation_file": row["validation_file"],
        "user_provided_suffix": row["suffix"],
    }


def _page(items: list[dict[str, Any]], limit: int, *, with_ends: bool) -> dict[str, Any]:
    """OpenAI's cursor page: `has_more` from the one extra row fetched past `limit`."""
    shown = items[:limit]
    page: dict[str, Any] = {"object": "list", "data": shown, "has_more": len(items) > limit}
    if with_ends:
        page["first_id"] = shown[0]["id"] if shown else None
        page["last_id"] = shown[-1]["id"] if shown else None
    return page


# --- refusals, in OpenAI's error shape ------------------------------------------------------------


def _error(status: int, message: str, *, type: str, param: str | None, code: str | None) -> Answer:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return Answer(status, body, Effect.REFUSED)


def _invalid(message: str, param: str | None, code: str | None = None) -> Answer:
    return _error(400, message, type="invalid_request_error", param=param, code=code)


def _no_key() -> Answer:
    return _error(
        401,
        "You didn't provide an API key. You need to provide your API key in an Authorization header using "
        "Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        type="invalid_request_error",
        param=None,
        code=None,
    )


def _missing_file(file_id: str) -> Answer:
    return _error(404, f"No such File object: {file_id}", type="invalid_request_error", param="id", code=None)


def _missing_job(job_id: str) -> Answer:
    return _error(
        404, f"Could not find fine-tune: {job_id}", type="invalid_request_error", param="fine_tune_id",
        code="fine_tune_not_found",
    )  # fmt: skip


def _is_metadata(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _create_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict):
        return _invalid("The request body must be a JSON object.", None)
    for required in ("model", "training_file"):
        if not isinstance(body.get(required), str) or not body[required]:
            return _invalid(f"Missing required parameter: '{required}'.", required, "missing_required_parameter")
    model = body["model"]
    if model not in FINE_TUNABLE and not model.startswith("ft:"):
        return _invalid(
            f"Model {model} is not available for fine-tuning or does not exist.", "model", "model_not_available"
        )
    suffix = body.get("suffix")
    if suffix is not None and (not isinstance(suffix, str) or len(suffix) > SUFFIX_CHARS):
        return _invalid(f"suffix must be a string of at most {SUFFIX_CHARS} characters.", "suffix")
    metadata = body.get("metadata")
    if metadata is not None:
        if not _is_metadata(metadata) or len(metadata) > METADATA_PAIRS:
            return _invalid(
                f"metadata must be an object of at most {METADATA_PAIRS} string keys and values.", "metadata"
            )
        for k, v in metadata.items():
            if len(k) > METADATA_KEY_CHARS or len(v) > METADATA_VALUE_CHARS:
                return _invalid(
                    f"metadata keys are at most {METADATA_KEY_CHARS} and values {METADATA_VALUE_CHARS} characters.",
                    f"metadata.{k}",
                )
    return None


def _new_id(prefix: str, length: int = 22) -> str:
    return prefix + "".join(secrets.choice(_ID_CHARS) for _ in range(length))
