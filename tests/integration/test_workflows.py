"""Workflows through the API (issue 10 part 5; I3, I9, I11, I14): app processes in the test's event loop,
the scripted model and the Jira and incident.io stand-ins on real sockets, the real Postgres.

A workflow run is a job: it runs to `succeeded`, each step's key is in the stand-ins' records (the Jira
comment's `ticketiq.step_key` property, incident.io's `idempotency_key`); a loop back to a step sends
a new key; a step executed again after the job was lost in the middle of it (its process's liveness
connection killed while the vendor held the request) sends the same key, and the vendor applies it
once. A runaway loop ends failed at `max_steps`; a gate refuses a step as it would a run's call; bad
requests get 404/403/422 naming the field, with nothing written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.crash import eventually
from tests.support.engine import kill_liveness, read_rows
from tests.support.standins import Standins
from tests.support.workflow_rig import (
    EXECUTED,
    api,
    app_process,
    ended,
    held_at_vendor,
    holder_of,
    keys_of,
    start,
)
from ticketiq.engine.step_keys import workflow_step_key


async def test_a_workflow_runs_to_succeeded_and_each_step_sends_its_key(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins) as h, api(h) as client:
        run_id = await start(client, "OPS-41")
        shown = await ended(client, run_id)
    assert shown["status"] == "succeeded", shown["error"]
    assert [s["step"] for s in shown["steps"]] == EXECUTED
    assert [s["seq"] for s in shown["steps"]] == list(range(1, 8)) and shown["steps_executed"] == 7
    assert all(s["status"] == "done" and s["settled"] is None for s in shown["steps"])
    # I11: each key from the run, the step and the steps executed before it.
    assert [s["key"] for s in shown["steps"]] == [workflow_step_key(run_id, s, n) for n, s in enumerate(EXECUTED)]
    summary = shown["steps"][1]
    assert summary["output"].startswith("OPS-41 is about: ") and summary["run_id"] is not None
    runs = await read_rows(db_url, "SELECT id::text, channel, idempotency_key, created_by, status FROM runs")
    assert runs == [{"id": summary["run_id"], "channel": "workflow", "idempotency_key": f"workflow\t{summary['key']}",
                     "created_by": "ops", "status": "succeeded"}]  # fmt: skip

    # The stand-ins' records: the incident carries the step key, each comment its own.
    incidents = await standins.writes(vendor="incidentio", operation="create_incident")
    assert [(w["key"], w["effect"]) for w in incidents] == [(keys_of(shown, "open")[0], "applied")]
    opened = shown["steps"][2]["output"]["incident"]["id"]
    comments = await standins.writes(vendor="jira", operation="add_comment", target="OPS-41")
    first, again = keys_of(shown, "comment")
    assert first != again  # a loop back to the step: a new key
    assert [(w["key"], w["effect"]) for w in comments] == [(first, "applied"), (again, "applied")]
    bodies = [w["body"]["body"]["content"][0]["content"][0]["text"] for w in comments]
    assert bodies == [f"Incident {opened} after 3 steps", f"Incident {opened} after 5 steps"]
    assert [p["value"] for w in comments for p in w["body"]["properties"]] == [first, again]

    job = (await read_rows(db_url, "SELECT * FROM jobs WHERE id = %s", run_id))[0]
    assert (job["kind"], job["attempt"], job["losses"], job["progress_done"]) == ("workflow", 1, 0, 7)
    assert job["result"]["steps_executed"] == 7 and job["state"]["at"] is None


async def test_a_step_executed_again_after_its_job_was_lost_mid_step_sends_the_same_key_applied_once(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    """The incident.io create is held at the vendor (a stall fault) when the process running the job
    loses its liveness connection, as a SIGKILL leaves it. The job is swept back and resumed from its
    state: the create, marked in doubt, is a keyed write its vendor dedupes for ever, so it is sent again
    with the SAME key (I9) and incident.io applies it once. The comment is held the same way on the
    second job, and read back by its key once it can no longer be in flight (I14): found, not sent
    again. The loop back to the comment still sends a new key."""
    async with (
        app_process(db_url, tmp_path, standins, "a", lead=False, write_budget_s=4.0) as a,
        app_process(db_url, tmp_path, standins, "b", lead=True, write_budget_s=4.0) as b,
        api(b) as client,
    ):
        await standins.fault("incidentio", "stall", stall_s=1.0, operation="create_incident")
        run_id = await start(client, "OPS-42")
        await held_at_vendor(standins)
        await kill_liveness(db_url, await holder_of(db_url, run_id))
        shown = await ended(client, run_id)
        assert shown["status"] == "succeeded", shown["error"]
        key = keys_of(shown, "open")
        assert key == [workflow_step_key(run_id, "open", 2)]
        writes: list[dict[str, Any]] = []

        async def both_arrived() -> bool:  # the held request lands too, whichever lands first
            nonlocal writes
            writes = await standins.writes(vendor="incidentio", operation="create_incident")
            return len(writes) == 2

        await eventually(both_arrived, 30, "the held create and its resend both reaching incident.io")
        assert sorted((w["key"], w["effect"]) for w in writes) == [(key[0], "applied"), (key[0], "deduped")]
        assert [s["settled"] for s in shown["steps"] if s["step"] == "open"] == ["resent_same_key"]
        assert (shown["attempts"], shown["losses"]) == (2, 1)
        assert [s["step"] for s in shown["steps"]] == EXECUTED
        settled = await read_rows(db_url, "SELECT actor, detail FROM audit_log WHERE action = 'workflow.step.settled'")
        assert [(r["detail"]["step"], r["detail"]["key"], r["detail"]["happened"]) for r in settled] == [
            ("open", key[0], "resent_same_key")
        ]

        # The comment, held and read back by its key: one comment, the key it was first sent with.
        await standins.fault("jira", "stall", stall_s=1.0, operation="add_comment")
        second = await start(client, "OPS-43")
        await held_at_vendor(standins)
        await kill_liveness(db_url, await holder_of(db_url, second))
        shown = await ended(client, second)
        assert shown["status"] == "succeeded", shown["error"]
        first, again = keys_of(shown, "comment")
        assert (first, again) == (workflow_step_key(second, "comment", 3), workflow_step_key(second, "comment", 5))
        comments = await standins.writes(vendor="jira", operation="add_comment", target="OPS-43")
        assert [(w["key"], w["effect"]) for w in comments] == [(first, "applied"), (again, "applied")]
        assert [s["settled"] for s in shown["steps"] if s["step"] == "comment"] == ["found", None]
    assert a.process.jobs.slots == {} and b.process.jobs.slots == {}


async def test_an_agent_step_executed_again_finds_the_run_it_made(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    """The job is lost while its agent step's run goes on (the run is lost with it, and resumed as any
    run): the step executed again makes no second run; the one run's answer is the step's output."""
    async with (
        app_process(db_url, tmp_path, standins, "a", lead=False, latency_ms=300) as a,
        app_process(db_url, tmp_path, standins, "b", lead=True, latency_ms=300) as b,
        api(b) as client,
    ):
        run_id = await start(client, "OPS-44")

        async def agent_running() -> bool:
            rows = await read_rows(db_url, "SELECT status FROM workflow_steps WHERE job_id = %s AND seq = 2", run_id)
            return rows == [{"status": "running"}]

        await eventually(agent_running, 60, "the agent step's run made")
        await kill_liveness(db_url, await holder_of(db_url, run_id))
        shown = await ended(client, run_id)
        assert shown["status"] == "succeeded", shown["error"]
        assert (shown["attempts"], shown["losses"]) == (2, 1)
        runs = await read_rows(db_url, "SELECT id::text, idempotency_key, answer FROM runs")
        summary = shown["steps"][1]
        assert runs == [{"id": summary["run_id"], "idempotency_key": f"workflow\t{summary['key']}",
                         "answer": summary["output"]}]  # fmt: skip
        assert summary["key"] == workflow_step_key(run_id, "summarise", 1)
    assert a.process.jobs.slots == {} and b.process.jobs.slots == {}


async def test_a_write_without_a_reader_left_in_doubt_fails_the_run_and_is_never_sent_again(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    """The Discord message is held at the vendor when the job is lost. Discord dedupes its nonce for
    minutes only and cannot be read back: the resumed run fails, "outcome unknown, not sent again"
    (I9), and audits it; the one message is the one the lost attempt sent."""
    async with (
        app_process(db_url, tmp_path, standins, "a", lead=False) as a,
        app_process(db_url, tmp_path, standins, "b", lead=True) as b,
        api(b) as client,
    ):
        await standins.fault("discord", "stall", stall_s=1.0, operation="send_message")
        run_id = await start(client, "OPS-49", "announce")
        await held_at_vendor(standins)
        await kill_liveness(db_url, await holder_of(db_url, run_id))
        shown = await ended(client, run_id, "announce")
        assert shown["status"] == "failed"
        assert "outcome unknown, not sent again" in shown["error"] and "step 'announce'" in shown["error"]
        assert [(s["step"], s["status"], s["settled"]) for s in shown["steps"]] == [
            ("announce", "failed", "unknown_not_sent")
        ]
        key = workflow_step_key(run_id, "announce", 0)

        async def landed() -> bool:
            return len(await standins.writes(vendor="discord")) == 1

        await eventually(landed, 30, "the held message landing")
        assert [(w["key"], w["effect"]) for w in await standins.writes(vendor="discord")] == [(key, "applied")]
        settled = await read_rows(db_url, "SELECT detail FROM audit_log WHERE action = 'workflow.step.settled'")
        assert [(r["detail"]["key"], r["detail"]["happened"]) for r in settled] == [(key, "unknown_not_sent")]
    assert a.process.jobs.slots == {} and b.process.jobs.slots == {}


async def test_max_steps_ends_a_runaway_loop_failed_with_the_reason(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins) as h, api(h) as client:
        run_id = await start(client, "OPS-45", "runaway")
        shown = await ended(client, run_id, "runaway")
    assert shown["status"] == "failed"
    assert "max_steps reached" in shown["error"] and "max_steps 4" in shown["error"]
    assert [s["step"] for s in shown["steps"]] == ["poll"] * 4
    assert len({s["key"] for s in shown["steps"]}) == 4  # every pass of the loop its own key


async def test_a_gate_refuses_a_step_as_it_refuses_a_runs_call_and_nothing_is_sent(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins, approval=["jira_add_comment"]) as h, api(h) as client:
        held = await ended(client, await start(client, "OPS-46"))
        admin = await h.token("boss", "admin")
        revoked = await client.put("/v1/gates/grants/flows/jira_get_issue", json={"granted": False},
                                   headers={"Authorization": f"Bearer {admin}"})  # fmt: skip
        assert revoked.status_code == 200, revoked.text
        refused = await ended(client, await start(client, "OPS-47"))
    assert held["status"] == "failed"
    assert "refused by the approval gate" in held["error"] and "never waits for one" in held["error"]
    assert [(s["step"], s["status"]) for s in held["steps"]][-1] == ("comment", "failed")
    assert await standins.writes(vendor="jira", operation="add_comment") == []
    assert refused["status"] == "failed" and "refused by the run_as gate" in refused["error"]
    assert "owner flows may not use tool jira_get_issue" in refused["error"]
    assert [(s["step"], s["status"]) for s in refused["steps"]] == [("read", "failed")]


async def test_bad_requests_are_refused_naming_the_field_and_nothing_is_written(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins, job_concurrency=0) as h, api(h) as client:
        listed = (await client.get("/v1/workflows")).json()["workflows"]
        assert [(w["name"], w["input_fields"], w["agents"]) for w in listed] == [
            ("announce", ["issue"], []), ("follow-up", ["issue"], ["summariser"]), ("runaway", ["issue"], [])
        ]  # fmt: skip
        refused = [
            ("/v1/workflows/nope/runs", {"input": {"issue": "OPS-1"}}, 404, ["path", "name"]),
            ("/v1/workflows/follow-up/runs", {"input": {}}, 422, ["body", "input", "issue"]),
            ("/v1/workflows/follow-up/runs", {"input": {"issue": "not a key"}}, 422, ["body", "input", "issue"]),
            ("/v1/workflows/follow-up/runs", {"input": {"issue": 7}}, 422, ["body", "input", "issue"]),
            ("/v1/workflows/follow-up/runs", {"input": "OPS-1"}, 422, ["body", "input"]),
            ("/v1/workflows/follow-up/runs", {"input": {"issue": "OPS-1"}, "by": "x"}, 422, ["body", "by"]),
        ]
        for path, body, status, loc in refused:
            response = await client.post(path, json=body)
            assert response.status_code == status, (body, response.text)
            assert response.json()["detail"][0]["loc"] == loc, body
        async with api(h, "caller", "narrow", agents=["summariser"]) as narrow:
            assert (
                await narrow.post("/v1/workflows/runaway/runs", json={"input": {"issue": "OPS-1"}})
            ).status_code == 201
        async with api(h, "caller", "other", agents=["lonely"]) as other:
            forbidden = await other.post("/v1/workflows/follow-up/runs", json={"input": {"issue": "OPS-1"}})
            assert forbidden.status_code == 403 and "summariser" in forbidden.json()["detail"][0]["msg"]
        assert len(await read_rows(db_url, "SELECT 1 FROM jobs")) == 1  # only narrow's run

        key = {"Idempotency-Key": "wf-1"}
        first = await client.post("/v1/workflows/follow-up/runs", json={"input": {"issue": "OPS-2"}}, headers=key)
        again = await client.post("/v1/workflows/follow-up/runs", json={"input": {"issue": "OPS-2"}}, headers=key)
        assert first.status_code == again.status_code == 201 and again.json() == first.json()
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert len(await read_rows(db_url, "SELECT 1 FROM jobs")) == 2

        shown = (await client.get(f"/v1/workflows/follow-up/runs/{first.json()['id']}")).json()
        assert (shown["status"], shown["input"], shown["next_step"], shown["steps"]) == (
            "queued", {"issue": "OPS-2"}, "read", []
        )  # fmt: skip
        wrong = await client.get(f"/v1/workflows/runaway/runs/{first.json()['id']}")
        assert wrong.status_code == 404 and wrong.json()["detail"][0]["loc"] == ["path", "run_id"]
        async with api(h, "caller", "stranger") as stranger:  # a caller reads only the runs it started
            hidden = await stranger.get(f"/v1/workflows/follow-up/runs/{first.json()['id']}")
            assert hidden.status_code == 404
        internal = await client.post("/v1/jobs", json={"kind": "workflow", "params": {"workflow": "follow-up"}})
        assert internal.status_code == 422 and internal.json()["detail"][0]["loc"] == ["body", "kind"]
