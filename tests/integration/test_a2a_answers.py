"""A2A tasks that wait for their client (DESIGN.md I18, one answer per question) and CancelTask, over a
real socket with the a2a-sdk's own client: an answer is bound to its message and, when it names one, to
its question; the same message again changes nothing; a caller's CancelTask stops nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from a2a.types.a2a_pb2 import CancelTaskRequest, GetTaskRequest, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError

from tests.support.a2a_rig import ACTOR, PRODUCTION, STAGING, a2a, count, message, send, states, text_of, v03_message
from tests.support.crash import eventually
from tests.support.engine import inputs_of, read_rows
from tests.support.http import TLS
from ticketiq.storage.task_store import as_json


async def test_an_answer_sent_again_changes_nothing_and_never_answers_the_next_question(
    db_url: str, tmp_path: Path
) -> None:
    # I18. The client's first send of its answer was cut (the process died after the input was
    # committed, before it replied): it sends the same message again once the run asks its next question.
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        asked = await send(client, message("clean up OPS-17", "c-1", agent="careful"))
        assert text_of(asked) == STAGING
        yes = message("yes", "c-2", agent=None, task_id=asked.id)
        second = await send(client, yes)
        assert (second.status.state, text_of(second)) == (TaskState.TASK_STATE_INPUT_REQUIRED, PRODUCTION)
        again = await send(client, yes)
        assert (again.id, again.status.state, text_of(again)) == (asked.id, TaskState.TASK_STATE_INPUT_REQUIRED,
                                                                  PRODUCTION)  # fmt: skip
        async with s.client(streaming=True) as streaming:
            streamed = [e async for e in streaming.send_message(yes)]
        assert states(streamed) == [TaskState.TASK_STATE_INPUT_REQUIRED]
        v03 = await s.rpc("message/send", v03_message("yes", "c-2", taskId=asked.id, contextId=asked.context_id))
        assert v03["result"]["status"]["state"] == "input-required", v03
        assert await inputs_of(db_url, asked.id) == [(STAGING, "given", "yes"), (PRODUCTION, "pending", None)]
        done = await send(client, message("no", "c-3", agent=None, task_id=asked.id))
        assert [p.text for a in done.artifacts for p in a.parts] == ["production: no"]
        late = await send(client, yes)  # after the task ended: the task as it is, not an error
        assert (late.status.state, [p.text for a in late.artifacts for p in a.parts]) == (
            TaskState.TASK_STATE_COMPLETED, ["production: no"])  # fmt: skip
        with pytest.raises(InvalidParamsError, match=r"params\.message\.messageId"):
            await send(client, message("no", "c-2", agent=None, task_id=asked.id))  # its id, other text
    assert await inputs_of(db_url, asked.id) == [(STAGING, "given", "yes"), (PRODUCTION, "given", "no")]
    given = await read_rows(db_url, "SELECT 1 FROM audit_log WHERE action = 'agent.run.input_given'")
    assert len(given) == 2


def naming(request: SendMessageRequest, question_id: str) -> SendMessageRequest:
    """The answer, naming the question it answers (its metadata's `question_id`)."""
    request.message.metadata.update({"question_id": question_id})
    return request


def questions_of(task: Task) -> list[dict[str, Any]]:
    """The questions an input-required status lists, each with its id."""
    found: list[dict[str, Any]] = as_json(task.status.message.metadata).get("questions", [])
    return found


async def test_an_answer_naming_its_question_answers_that_one_and_a_late_one_answers_no_other(
    db_url: str, tmp_path: Path
) -> None:
    # I18: an answer may name the question it answers; a late message meant for a question answered
    # meanwhile (another message, so no repeat) is refused and never taken for the run's next question.
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        asked = await send(client, message("clean up OPS-19", "q-1", agent="careful"))
        [first] = questions_of(asked)
        assert first["question"] == STAGING
        second = await send(client, naming(message("yes", "q-2", agent=None, task_id=asked.id), first["question_id"]))
        [next_question] = questions_of(second)
        assert (text_of(second), next_question["question"]) == (PRODUCTION, PRODUCTION)
        with pytest.raises(InvalidParamsError, match=r"params\.message\.metadata\.question_id"):
            await send(client, naming(message("yes, do it", "q-3", agent=None, task_id=asked.id), first["question_id"]))
        with pytest.raises(InvalidParamsError, match=r"params\.message\.metadata\.question_id"):
            await send(client, naming(message("yes", "q-4", agent=None, task_id=asked.id), "not-a-question"))
        assert await inputs_of(db_url, asked.id) == [(STAGING, "given", "yes"), (PRODUCTION, "pending", None)]
        done = await send(client, naming(message("no", "q-5", agent=None, task_id=asked.id),
                                         next_question["question_id"]))  # fmt: skip
    assert [p.text for a in done.artifacts for p in a.parts] == ["production: no"]
    assert await inputs_of(db_url, asked.id) == [(STAGING, "given", "yes"), (PRODUCTION, "given", "no")]


async def test_two_sends_of_one_answer_at_once_answer_one_question(db_url: str, tmp_path: Path) -> None:
    # I18: the binding is found atomically. Both sends wait on the questions' row locks (held here) after
    # their statements began, so neither can see the other's answer but through the lock.
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        asked = await send(client, message("clean up OPS-18", "b-1", agent="both"))
        assert text_of(asked) == f"{STAGING}\n{PRODUCTION}"
        yes = message("yes", "b-2", agent=None, task_id=asked.id)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as blocker:
            async with blocker.transaction():
                await blocker.execute("SELECT 1 FROM inputs WHERE run_id = %s FOR UPDATE", (asked.id,))
                sends = [asyncio.create_task(send(client, yes)) for _ in range(2)]
                await eventually(lambda: waiting_on_locks(db_url, 2), what="both sends waiting on the lock")
            answers = await asyncio.gather(*sends)
    assert [a.id for a in answers] == [asked.id, asked.id]
    assert await inputs_of(db_url, asked.id) == [(STAGING, "given", "yes"), (PRODUCTION, "pending", None)]


async def waiting_on_locks(db_url: str, n: int) -> bool:
    rows = await read_rows(db_url, "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND wait_event_type = 'Lock' AND query ILIKE '%%inputs%%'")  # fmt: skip
    return int(rows[0]["n"]) >= n


async def test_a_task_waiting_for_an_approval_is_not_answered_by_a_message_and_cancel_stops_it(
    db_url: str, tmp_path: Path
) -> None:
    async with a2a(db_url, tmp_path, approval=["probe_write"]) as s, s.client() as client:
        held = await send(client, message("write OPS-10", "m-10", agent="writer"))
        assert held.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "approval" in text_of(held)
        with pytest.raises(InvalidParamsError, match=r"params\.message\.taskId: .* not waiting for input"):
            await send(client, message("yes", "m-11", agent=None, task_id=held.id))
        canceled = await client.cancel_task(CancelTaskRequest(id=held.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        assert text_of(canceled) == f"stopped by {ACTOR}"
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=held.id))
    assert s.h.probe.writes() == []
    runs = await read_rows(db_url, "SELECT status, error FROM runs")
    assert runs == [{"status": "stopped", "error": f"stopped by {ACTOR}"}]
    assert await count(db_url, "inputs") == 0


async def test_cancel_task_needs_the_operator_role_as_the_stop_route_does(db_url: str, tmp_path: Path) -> None:
    # DESIGN.md, "Who may do what": Stop is the operator's, through A2A as through the API.
    async with a2a(db_url, tmp_path, approval=["probe_write"]) as s:
        caller, operator = await s.h.token("cal-1", "caller"), await s.h.token("op-1", "operator")
        async with s.client(caller) as client:
            held = await send(client, message("write OPS-12", "m-12", agent="writer"))
            other = await send(client, message("write OPS-13", "m-13", agent="writer"))
            with pytest.raises(TaskNotCancelableError, match="may not stop runs: that needs the operator role"):
                await client.cancel_task(CancelTaskRequest(id=held.id))  # its own task
            still = await client.get_task(GetTaskRequest(id=held.id))
        refused = await s.rpc("tasks/cancel", {"id": held.id}, token=caller)  # v0.3: the same refusal
        assert refused["error"]["code"] == -32002, refused
        assert "needs the operator role" in refused["error"]["message"]
        async with httpx.AsyncClient(verify=TLS, base_url=s.base) as http:
            stop = await http.post(f"/v1/runs/{held.id}/stop", json={}, headers={"Authorization": f"Bearer {caller}"})
            assert stop.status_code == 403 and "needs the operator role" in stop.json()["detail"][0]["msg"]
            assert await read_rows(db_url, "SELECT stopped_by FROM runs WHERE id = %s", held.id) == [
                {"stopped_by": None}]  # fmt: skip
            async with s.client(operator) as client:
                canceled = await client.cancel_task(CancelTaskRequest(id=held.id))
            stopped = await http.post(f"/v1/runs/{other.id}/stop", json={},
                                      headers={"Authorization": f"Bearer {operator}"})  # fmt: skip
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED and text_of(canceled) == "stopped by op-1"
    assert stopped.status_code == 202 and stopped.json()["status"] == "stopped"
    runs = await read_rows(db_url, "SELECT id::text, error FROM runs ORDER BY created_at")
    assert runs == [{"id": held.id, "error": "stopped by op-1"}, {"id": other.id, "error": "stopped by op-1"}]
    assert s.h.probe.writes() == []


# ----- refused: nothing is stored ------------------------------------------------------------------------
