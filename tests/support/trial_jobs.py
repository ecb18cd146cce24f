"""How a kill trial begins and reads back its background jobs (issue 10): a source sync of the trial's
own generated Jira project (`POST /v1/jobs`) and a run of the sample `follow-up` workflow on its own
ticket (`POST /v1/workflows/follow-up/runs`).

Each request carries an Idempotency-Key of the trial's own; one the event cut (the victim died before
it answered) is sent again through the edge with the same key, as a client would, until it is answered.
Jobs are claimed by any process's worker: the victim's is woken the moment it makes the job, the
survivor's looks only every `SURVIVOR_JOB_POLL_S`, so the victim nearly always claims it; which one
did is recorded (`Trial.claimed_by`).
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import psycopg

from tests.support.cluster import Cluster
from tests.support.http import web
from tests.support.trials import JobSeen, Trial, sync_project

# A sync trial's project: SYNC_ISSUES issues read SYNC_PAGE at a time, each search answered
# SEARCH_STALL_S late (the stand-in's stall fault, for the `search` operation only: the triage and
# workflow trials' Jira calls are not slowed), so a sync takes about 4 s and spans the kill window.
SYNC_ISSUES = 300
SYNC_PAGE = 10
SEARCH_STALL_S = 0.1
WORKFLOW = "follow-up"
SURVIVOR_JOB_POLL_S = 1.0
FIRST_TRY_S = 5.0  # a stalled process holds a request: give up on it and deliver again through the edge
REDELIVER_FOR_S = 60.0
CLAIM_SEEN_WITHIN_S = 10.0


def stall_searches(cluster: Cluster, stall_s: float = SEARCH_STALL_S) -> None:
    """Every Jira search from now on answers `stall_s` late (set once, for the whole run)."""
    fault = {"vendor": "jira", "operation": "search", "mode": "stall", "stall_s": stall_s, "count": 10**9}
    web.post(f"{cluster.standin_url}/_standin/faults", json=fault, timeout=10).raise_for_status()


def prepare(cluster: Cluster, trial: Trial) -> None:
    """Before the round's victim starts: a sync trial's project, filled with its generated issues."""
    if trial.kind != "sync":
        return
    made = web.post(f"{cluster.standin_url}/_standin/jira/projects/{trial.subject}/generate",
                      json={"count": SYNC_ISSUES}, timeout=60)  # fmt: skip
    made.raise_for_status()
    assert made.json()["issues"] == SYNC_ISSUES, made.text


def begin_job(
    cluster: Cluster, trial: Trial, victim_base: str, edge_base: str, first_try_s: float = FIRST_TRY_S
) -> None:
    """Make the trial's job on the victim; if the event cut the request, again through the edge with
    the same Idempotency-Key. The job's id becomes the trial's ref."""
    if trial.kind == "sync":
        path = "/v1/jobs"
        body: dict[str, Any] = {"kind": "source_sync", "params": {"project": trial.subject, "page_size": SYNC_PAGE}}
    else:
        path = f"/v1/workflows/{WORKFLOW}/runs"
        body = {"input": {"issue": trial.subject}}
    post_keyed(cluster, trial, path, body, victim_base, edge_base, first_try_s)


def idempotency_key(trial: Trial) -> str:
    return f"kill-trial-{trial.kind}-{trial.ticket}"


def post_keyed(
    cluster: Cluster,
    trial: Trial,
    path: str,
    body: dict[str, Any],
    victim_base: str,
    edge_base: str,
    first_try_s: float = FIRST_TRY_S,
) -> None:
    """POST `body` to `path` on the victim under the trial's own Idempotency-Key; if the event cut the
    request, again through the edge with the same key. The id it was answered with (a job's, a run's)
    becomes the trial's ref."""
    headers = {**cluster.auth, "Idempotency-Key": idempotency_key(trial)}
    answered = _post(f"{victim_base}{path}", body, headers, first_try_s)
    if answered is None:
        trial.interrupted = True
        deadline = time.monotonic() + REDELIVER_FOR_S
        while answered is None and time.monotonic() < deadline:
            time.sleep(0.2)
            answered = _post(f"{edge_base}{path}", body, headers, 30.0)
    if answered is None:
        raise AssertionError(f"{trial.kind} {trial.subject} was not taken through the edge in {REDELIVER_FOR_S} s")
    trial.ref = answered


def _post(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> str | None:
    """The job's id, or None when no answer came, the process failed it, or the key is still being
    answered (409: the first request's process may be dying with it)."""
    try:
        response = web.post(url, json=body, headers=headers, timeout=timeout_s)
    except httpx.TransportError:
        return None
    if response.status_code >= 500 or response.status_code == 409:
        return None
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


def first_claim(cluster: Cluster, trial: Trial, victim_holder: str) -> str:
    """Which process's worker claimed the trial's job first: `victim`, `survivor`, or `none` (not
    claimed within CLAIM_SEEN_WITHIN_S). A job first seen past its first attempt lost that attempt,
    and only the victim loses one."""
    deadline = time.monotonic() + CLAIM_SEEN_WITHIN_S
    while time.monotonic() < deadline:
        try:
            rows = cluster.rows("SELECT holder, attempt FROM jobs WHERE id::text = %s", trial.ref)
        except psycopg.OperationalError:  # db mode: Postgres was killed and is not back yet
            rows = []
        if rows and int(rows[0]["attempt"]) >= 1:
            first = rows[0]["attempt"] > 1 or rows[0]["holder"] == victim_holder
            return "victim" if first else "survivor"
        time.sleep(0.02)
    return "none"


# ----- reading a job trial back ----------------------------------------------------------------------

# The trial's job: the one its request was answered with, else the first made for it.
_MINE = "mine AS (SELECT * FROM j ORDER BY (id::text = %(ref)s) DESC, created_at LIMIT 1)"
_JOB = """(SELECT status FROM mine) AS status, (SELECT count(*) FROM j) AS jobs,
       (SELECT losses FROM mine) AS losses, (SELECT created_at FROM mine) AS created_at,
       (SELECT finished_at FROM mine) AS finished_at"""

_SYNC = f"""
WITH j AS (SELECT * FROM jobs WHERE kind = 'source_sync' AND params->>'project' = %(project)s),
     {_MINE},
     k AS (SELECT key FROM knowledge WHERE source = 'jira' AND project = %(project)s)
SELECT {_JOB}, (SELECT (result->>'issues')::int FROM mine) AS result_issues,
       (SELECT count(*) FROM standin.jira_issues WHERE project = %(project)s) AS generated,
       (SELECT count(*) FROM k) AS rows, (SELECT count(DISTINCT key) FROM k) AS keys
"""

_WORKFLOW = f"""
WITH j AS (SELECT * FROM jobs WHERE kind = 'workflow' AND params->>'workflow' = %(workflow)s
                                AND params->'input'->>'issue' = %(issue)s),
     {_MINE},
     c AS (SELECT key, body->'body' AS text FROM standin.writes
            WHERE vendor = 'jira' AND operation = 'add_comment' AND effect = 'applied' AND target = %(issue)s)
SELECT {_JOB},
       (SELECT count(*) FROM workflow_steps s JOIN j ON j.id = s.job_id
         WHERE s.tool = 'jira_add_comment' AND s.status = 'done') AS comment_steps,
       (SELECT count(*) FROM c) AS comments,
       (SELECT max(n) FROM (SELECT count(*) AS n FROM c WHERE key IS NOT NULL GROUP BY key) per) AS most_per_key,
       (SELECT max(n) FROM (SELECT count(*) AS n FROM c GROUP BY text) per) AS most_per_text
"""


def observe_job(cluster: Cluster, trial: Trial) -> JobSeen:
    params = {"ref": trial.ref or "-", "project": sync_project(trial.ticket), "workflow": WORKFLOW,
              "issue": trial.subject}  # fmt: skip
    row = cluster.rows_named(_SYNC if trial.kind == "sync" else _WORKFLOW, params)[0]
    return JobSeen.from_row(row)
