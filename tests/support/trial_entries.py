"""How a kill trial begins each of its records, through the real entry points, signed as each protocol
signs: a webhook delivery (HMAC over the timestamp and body), a Teams message (a Bot Framework JWT from
the stand-in token service), a cron fire (a schedule made through the API, due now), and a run of the
`noter` agent (`POST /v1/runs` under an Idempotency-Key: the MCP server's tools); the job kinds (a source
sync, a workflow run) begin in `trial_jobs.py`. And how each trial is read back from the database
afterwards.

A request the event cut (the process died or stalled before it answered) is sent again through the edge,
as Teams and webhook senders deliver again: the entry point's dedupe makes that the same record.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx

from tests.support.cluster import Cluster
from tests.support.http import web
from tests.support.trial_jobs import begin_job, idempotency_key, observe_job, post_keyed
from tests.support.trials import JOB_KINDS, JobSeen, Observed, Seen, Trial

TRIGGER = "oncall"
SECRET = "kill-trials-trigger-secret-0123456789"
AGENT_THREAD = "19:ops@thread.tacv2;messageid=1700000000000"  # where triage's own teams_reply goes
FIRST_TRY_S = 5.0  # a stalled process holds a request: give up on it and deliver again through the edge
REDELIVER_FOR_S = 60.0
NOTER = "noter"  # the sample's agent of the MCP server's tools (add_note, set_note, get_note)


def declare_trigger(cluster: Cluster, base: str) -> None:
    made = web.post(f"{base}/v1/triggers", json={"name": TRIGGER, "agent": "triage", "secret": SECRET},
                      headers=cluster.auth, timeout=30)  # fmt: skip
    assert made.status_code == 201, made.text


def begin(cluster: Cluster, trial: Trial, victim_base: str, edge_base: str, first_try_s: float = FIRST_TRY_S) -> None:
    """Start the trial's record on the victim; deliver it again through the edge if the event cut it (no
    answer within `first_try_s`, or a 5xx)."""
    if trial.kind == "cron":
        trial.ref = schedule_due_now(cluster, edge_base, trial.ticket)
        return
    if trial.kind in JOB_KINDS:
        begin_job(cluster, trial, victim_base, edge_base, first_try_s)
        return
    if trial.kind == "mcp":
        body = {"agent": NOTER, "input": f"Note OPS-{trial.ticket}: checkout is failing"}
        post_keyed(cluster, trial, "/v1/runs", body, victim_base, edge_base, first_try_s)
        return
    send = _webhook if trial.kind == "webhook" else _teams
    if send(cluster, trial, victim_base, first_try_s):
        return
    trial.interrupted = True
    deadline = time.monotonic() + REDELIVER_FOR_S
    while time.monotonic() < deadline:
        if send(cluster, trial, edge_base, 30.0):
            return
        time.sleep(0.2)
    raise AssertionError(f"{trial.kind} OPS-{trial.ticket} was not taken through the edge in {REDELIVER_FOR_S} s")


def _webhook(cluster: Cluster, trial: Trial, base: str, timeout_s: float) -> bool:
    body = json.dumps({"alert": "checkout 502s", "ticket": f"OPS-{trial.ticket}", "source": "pagerduty",
                       "text": f"Triage OPS-{trial.ticket}: checkout 502s"}).encode()  # fmt: skip
    t = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    headers = {"X-TicketIQ-Delivery": trial.ref, "X-TicketIQ-Signature": f"t={t},v1={mac}"}
    try:
        response = web.post(f"{base}/v1/hooks/{TRIGGER}", content=body, headers=headers, timeout=timeout_s)
    except httpx.TransportError:
        return False
    if response.status_code >= 500:
        return False
    assert response.status_code in (200, 201, 202), response.text
    return True


def post_teams_activity(
    cluster: Cluster, base: str, activity_id: str, conversation: str, text: str, timeout_s: float = 30
) -> httpx.Response | None:
    """A Teams message activity, signed by the Bot Framework stand-in's token as Teams signs one, posted
    to `base`; None when no answer came (the process died before it answered)."""
    service_url = cluster.env["TICKETIQ_TEAMS_SERVICE_URL"]
    minted = web.post(f"{cluster.standin_url}/_standin/botframework/token", timeout=30, json={
        "audience": cluster.env["TICKETIQ_TEAMS_APP_ID"], "service_url": service_url,
    })  # fmt: skip
    minted.raise_for_status()
    activity = {
        "type": "message", "id": activity_id, "serviceUrl": service_url, "channelId": "msteams",
        "from": {"id": "29:user-ana", "name": "Ana", "aadObjectId": "aad-ana"},
        "conversation": {"id": conversation}, "recipient": {"id": "28:bot"},
        "text": f"<at>TicketIQ</at> {text}", "channelData": {"team": {"aadGroupId": "standin-team"}},
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {minted.json()['access_token']}"}
    try:
        return web.post(f"{base}/v1/teams/messages", json=activity, headers=headers, timeout=timeout_s)
    except httpx.TransportError:
        return None


def _teams(cluster: Cluster, trial: Trial, base: str, timeout_s: float) -> bool:
    text = f"Triage OPS-{trial.ticket}: checkout is failing"
    response = post_teams_activity(cluster, base, trial.ref, trial.conversation, text, timeout_s)
    if response is None or response.status_code >= 500:
        return False
    assert response.status_code in (200, 201), response.text
    return True


def schedule_due_now(cluster: Cluster, base: str, ticket: int) -> str:
    """A daily schedule of the triage agent at the database clock's current minute, made through the
    API; its next fire time is then moved back to that minute (the one row the harness writes), so the
    leader's next check fires it."""
    minute = cluster.rows("SELECT date_trunc('minute', now() AT TIME ZONE 'UTC') AS m")[0]["m"]
    body = {"agent": "triage", "cron": f"{minute.minute} {minute.hour} * * *", "timezone": "UTC",
            "input": f"Triage OPS-{ticket}: checkout is failing"}  # fmt: skip
    made = web.post(f"{base}/v1/schedules", json=body, headers=cluster.auth, timeout=30)
    assert made.status_code == 201, made.text
    schedule_id = str(made.json()["id"])
    moved = cluster.rows(
        "UPDATE schedules SET next_fire_at = %s AT TIME ZONE 'UTC' WHERE id = %s RETURNING id", minute, schedule_id
    )
    assert len(moved) == 1
    return schedule_id


# ----- reading a trial back ------------------------------------------------------------------------

# Each kind's record and whether it reached its own end (a fire's outcome recorded).
_RUN_OF = {
    "webhook": "SELECT run_id, true AS recorded FROM trigger_deliveries "
    "WHERE trigger = 'oncall' AND delivery_id = %(ref)s",
    "teams": "SELECT run_id, true AS recorded FROM teams_inbox WHERE activity_id = %(ref)s",
    "cron": "SELECT run_id, outcome_attempt IS NOT NULL AS recorded FROM schedule_fires "
    "WHERE schedule_id::text = %(ref)s",
    "mcp": "SELECT id AS run_id, true AS recorded FROM runs WHERE id::text = %(ref)s",
}

_OBSERVE = """
WITH rec AS ({run_of}),
     run AS (SELECT r.status, r.created_at, r.finished_at, c.losses, rec.recorded,
                    (SELECT count(*) FROM run_attempts a WHERE a.run_id = r.id AND a.ended = 'handed_back') AS handed
               FROM rec JOIN runs r ON r.id = rec.run_id JOIN checkpoints c ON c.run_id = r.id),
     w AS (SELECT vendor, operation, target, body::text AS body FROM standin.writes WHERE effect = 'applied')
SELECT (SELECT status FROM run) AS status, (SELECT losses FROM run) AS losses,
       (SELECT created_at FROM run) AS created_at, (SELECT finished_at FROM run) AS finished_at,
       (SELECT recorded FROM run) AS recorded, (SELECT handed FROM run) AS handed,
       (SELECT count(*) FROM w WHERE vendor = 'incidentio' AND body LIKE %(incident)s) AS incidents,
       (SELECT count(*) FROM w WHERE vendor = 'jira' AND target = %(issue)s) AS comments,
       (SELECT count(*) FROM w WHERE vendor = 'teams' AND target = %(agent_thread)s AND body LIKE %(reply)s)
           AS agent_replies,
       (SELECT count(*) FROM w WHERE vendor = 'teams' AND target = %(conversation)s) AS turn_replies,
       (SELECT count(*) FROM runs WHERE idempotency_key LIKE %(run_key)s) AS runs,
       (SELECT count(*) FROM w WHERE vendor = 'mcp' AND operation = 'add_note' AND target = %(issue)s) AS adds,
       (SELECT count(*) FROM w WHERE vendor = 'mcp' AND operation = 'set_note' AND target = %(status_note)s) AS sets,
       (SELECT text FROM standin.mcp_notes WHERE note_id = %(status_note)s) AS status_note,
       EXISTS (SELECT 1 FROM rec JOIN calls c ON c.run_id = rec.run_id
                WHERE c.tool = 'notes__add_note' AND c.status = 'done' AND c.outcome->'result' ? 'note_id')
           AS add_done
"""


def observe(cluster: Cluster, trial: Trial) -> Seen:
    if trial.kind in JOB_KINDS:
        return observe_job(cluster, trial)
    sql = _OBSERVE.format(run_of=_RUN_OF[trial.kind])
    n = trial.ticket
    params = {"ref": trial.ref, "incident": f"%OPS-{n}:%", "issue": f"OPS-{n}", "agent_thread": AGENT_THREAD,
              "reply": f"%Triaged OPS-{n}:%", "conversation": trial.conversation or "-",
              "status_note": f"OPS-{n}-status",
              # POST /v1/runs keeps `api<TAB><token><TAB><key>` (engine/run_keys.py); only an MCP trial posts one.
              "run_key": f"api\t%\t{idempotency_key(trial)}" if trial.kind == "mcp" else "-"}  # fmt: skip
    with_params: dict[str, Any] = cluster.rows_named(sql, params)[0]
    ended = with_params["status"] == "succeeded" and bool(with_params["recorded"])
    if trial.kind == "teams":
        ended = ended and int(with_params["turn_replies"]) > 0
    return Observed.from_row({**with_params, "ended": ended})


def finished(seen: Seen) -> bool:
    """Nothing more will happen to it: its run ended (succeeded with its record's end, failed or stopped), or
    its job ended."""
    if isinstance(seen, JobSeen):
        return seen.finished_at is not None
    return seen.run_status in ("failed", "interrupted", "stopped") or seen.ended
