"""A2A tasks on our Postgres: the a2a-sdk's `TaskStore` over the `Database` pool (`queries/a2a.sql`).

One task per run started through A2A; the task id is the run id. A task's state is never stored: `get`
composes it from the run (`a2a_task_state()` in migration 006, the one mapping), with the answer as
the completed task's artifact and the error as the failed or canceled task's status message. `save`
keeps only what the run does not know: the context id, the messages (merged by id) and the metadata.

Who asks comes with the sdk's call context (`Caller`, put there by the A2A entry point): a caller reads
and lists only the tasks its own token started, an operator every task.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.tasks.task_store import TaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import parse_lenient
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]

from ticketiq.errors import TicketIQError
from ticketiq.storage.database import Database, Row

log = logging.getLogger(__name__)

# Where the A2A entry point puts the `Caller` in the sdk's call context state.
CALLER = "ticketiq.caller"
ANSWER_ARTIFACT = "answer"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# A waiting run's questions, each {question_id, question}.
Questions = list[dict[str, str]]


@dataclass(frozen=True)
class Waits:
    """What a run waiting for its client waits for, as the input-required status says it: in words (the
    questions it asked, the approvals it waits on), and its questions each with the id an answering
    message may name in its metadata (`question_id`, I18)."""

    text: str
    questions: Questions


DescribeWaiting = Callable[[str], Awaitable[Waits]]


@dataclass(frozen=True)
class Caller:
    """Who makes an A2A call, as the task store needs it."""

    name: str  # the token's name: the task's `created_by` when its first message is saved
    scope: str | None  # whose tasks it reads: its own (the name), or None for every task


@dataclass(frozen=True)
class Progress:
    """What a run says of its task: the status and, once completed, the answer as an artifact."""

    status: TaskStatus
    artifacts: list[Artifact]


def caller_of(context: ServerCallContext) -> Caller:
    found = context.state.get(CALLER)
    if not isinstance(found, Caller):
        # Only a request BearerAuth let through reaches the store: never guess who asks.
        raise TicketIQError("an A2A call reached the task store without its caller; refusing it")
    return found


def as_json(message: Any) -> dict[str, Any]:
    """A protocol message in the protocol's JSON form (camelCase), as tasks keep their messages."""
    found: dict[str, Any] = MessageToDict(message)
    return found


def run_id_of(task_id: str) -> str | None:
    """The run a task id names (its canonical uuid text), or None: no run has such an id."""
    try:
        return str(uuid.UUID(task_id))
    except ValueError:
        return None


class RunTaskStore(TaskStore):
    def __init__(self, db: Database, waiting: DescribeWaiting) -> None:
        self.db = db
        self.waiting = waiting

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        run_id = run_id_of(task_id)
        if run_id is None:
            return None
        row = await self.db.fetch_one("a2a.get", {"run_id": run_id, "scope": caller_of(context).scope})
        return None if row is None else await self._task(row)

    async def progress(self, run_id: str, context: ServerCallContext, context_id: str) -> Progress | None:
        """The task's status and artifacts as its run has them now, whether or not the task's row was
        written yet (a follower of a run just made reads this); None when the caller sees no such run."""
        row = await self.db.fetch_one("a2a.progress", {"run_id": run_id, "scope": caller_of(context).scope})
        if row is None:
            return None
        return Progress(await self._status(row, context_id), _artifacts(row))

    async def save(self, task: Task, context: ServerCallContext) -> None:
        # The state, status and artifacts are the run's: whatever the sdk set there is not kept.
        run_id = run_id_of(task.id)
        params = {
            "run_id": run_id,
            "context_id": task.context_id,
            "history": _unique(as_json(m) for m in task.history),
            "metadata": as_json(task.metadata),
            "created_by": caller_of(context).name,
        }
        if run_id is None or await self.db.fetch_one("a2a.save", params) is None:
            log.warning("A2A task %r was not saved: no run has that id", task.id)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """The caller's tasks, newest first, one page after `page_token`."""
        after_at, after_id = _cursor(params.page_token)
        page_size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        changed_after = (
            params.status_timestamp_after.ToDatetime(UTC) if params.HasField("status_timestamp_after") else None
        )
        rows = await self.db.fetch_all("a2a.list", {
            "scope": caller_of(context).scope, "context_id": params.context_id or None,
            "state": TaskState.Name(params.status) if params.status else None, "changed_after": changed_after,
            "after_at": after_at, "after_id": after_id, "limit": page_size + 1,
        })  # fmt: skip
        found = [r for r in rows if r["run_id"] is not None]
        page = found[:page_size]
        more = len(found) > page_size
        return ListTasksResponse(
            tasks=[await self._task(r) for r in page],
            next_page_token=_token(page[-1]) if more else "",
            page_size=page_size,
            total_size=int(rows[0]["total"]) if rows else 0,
        )

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """The task's row only: its run and transcript stay."""
        run_id = run_id_of(task_id)
        if run_id is not None:
            await self.db.execute("a2a.delete", {"run_id": run_id, "scope": caller_of(context).scope})

    # ----- composing a task from its row and its run -----------------------------------------------------

    async def _task(self, row: Row) -> Task:
        run_id = str(row["run_id"])
        task = Task(
            id=run_id,
            context_id=row["context_id"],
            status=await self._status(row, row["context_id"]),
            artifacts=_artifacts(row),
            history=[parse_lenient(m, Message()) for m in row["history"]],
        )
        if row["metadata"]:
            task.metadata.update(row["metadata"])
        return task

    async def _status(self, row: Row, context_id: str) -> TaskStatus:
        run_id = str(row["run_id"])
        state = TaskState.Value(row["state"])
        status = TaskStatus(state=state)
        status.timestamp.FromDatetime(row["changed_at"])
        said, questions = await self._said(run_id, state, row["error"])
        if said:
            # The same words get the same message id: a status read twice is one message of the history.
            message_id = str(uuid.uuid5(uuid.UUID(run_id), f"{row['state']}:{said}"))
            status.message.CopyFrom(
                Message(
                    message_id=message_id,
                    task_id=run_id,
                    context_id=context_id,
                    role=Role.ROLE_AGENT,
                    parts=[Part(text=said)],
                )
            )
            if questions:
                status.message.metadata.update({"questions": questions})
        return status

    async def _said(self, run_id: str, state: int, error: str | None) -> tuple[str | None, Questions]:
        """What the status says besides its state: what the run waits for (and the questions it asked), or
        why it ended."""
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            waits = await self.waiting(run_id)
            return waits.text, waits.questions
        if state in (TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED):
            return error, []  # I7: a run lost too often tells its task why, as any failed run does
        return None, []


def _artifacts(row: Row) -> list[Artifact]:
    # I12, I13: the answer lands on the task once the run handed it on (succeeded), on whichever process.
    if row["state"] != "TASK_STATE_COMPLETED" or row["answer"] is None:
        return []
    return [Artifact(artifact_id=ANSWER_ARTIFACT, name=ANSWER_ARTIFACT, parts=[Part(text=row["answer"])])]


def _unique(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each message once, by its id (the sdk may carry a status message into the history twice)."""
    seen: set[Any] = set()
    kept = []
    for message in messages:
        key = message.get("messageId")
        if key not in seen:
            seen.add(key)
            kept.append(message)
    return kept


def _token(row: Row) -> str:
    micros = (row["created_at"] - _EPOCH) // _MICROSECOND
    return encode_list_tasks_cursor(ListTasksCursor(timestamp_ns=micros * 1000, task_id=str(row["run_id"])))


def _cursor(page_token: str) -> tuple[datetime | None, str | None]:
    """Where the page starts: after the task a page token names (None, None: from the newest)."""
    if not page_token:
        return None, None
    cursor = decode_list_tasks_cursor(page_token)
    run_id = None if cursor is None else run_id_of(cursor.task_id)
    if cursor is None or cursor.timestamp_ns is None or run_id is None:
        raise InvalidParamsError(
            message="params.pageToken is not a page token this server gave; send the nextPageToken of the "
            "previous page, or none for the first",
            data={"field": "params.pageToken"},
        )
    return _EPOCH + (cursor.timestamp_ns // 1000) * _MICROSECOND, run_id
