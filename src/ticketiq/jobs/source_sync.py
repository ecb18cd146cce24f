"""Source sync (issue 10, I13: resumable): every issue of a Jira project into the knowledge table.

Pages come from Jira's enhanced search in key order. Each page's rows AND the cursor to the next page
(with the progress) are written by ONE statement fenced on the job's attempt (`Job.write_page`,
I3), so whatever process runs the job next goes on from the page after the last one written, and an
issue is never imported twice (rows are upserted on (source, key)). A job taken over mid-page writes
nothing of that page: its statement matches no row and it stops (JobLost).

Params: `{"source": "jira", "project": "OPS", "page_size": 50}` (source defaults to jira, page_size
to 50, at most 100: Jira's page size with fields). Result: `{project, issues, pages}`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ticketiq.jobs.jira_source import (
    FIELDS,
    PROJECT_KEY,
    SOURCE,
    PageMalformed,
    SearchPage,
    SyncCursor,
    jql_for,
    knowledge_rows,
)
from ticketiq.jobs.kinds import Job, JobCancelled, JobFailed, JobKind, params_error
from ticketiq.tools.base import CallContext
from ticketiq.tools.http import Send, VendorFailed, request
from ticketiq.tools.jira import auth_headers as jira_auth

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)

NAME = "source_sync"
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
_PARAMS = ("source", "project", "page_size")


def check(params: Mapping[str, Any], engine: Engine | None = None) -> dict[str, Any]:
    """The params, normalised; a 422 naming the first field that is wrong. Pure."""
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise params_error(unknown[0], f"unknown parameter; a source sync takes {', '.join(_PARAMS)}")
    source = params.get("source", SOURCE)
    if source != SOURCE:
        raise params_error("source", f"unknown source {source!r}; the one source is {SOURCE!r}")
    project = params.get("project")
    if not isinstance(project, str) or not PROJECT_KEY.match(project):
        raise params_error("project", "a Jira project key is required: 2-10 of A-Z, 0-9 and _, a letter first (OPS)")
    size = params.get("page_size", DEFAULT_PAGE_SIZE)
    if not isinstance(size, int) or isinstance(size, bool) or not 1 <= size <= MAX_PAGE_SIZE:
        raise params_error("page_size", f"an integer from 1 to {MAX_PAGE_SIZE}")
    return {"source": source, "project": project, "page_size": size}


async def run(job: Job) -> dict[str, Any]:
    project, size = job.params["project"], int(job.params["page_size"])
    cursor = SyncCursor.of(job.state)
    jira = _Jira(job)
    if not cursor.started:
        cursor = SyncCursor(total=await jira.count(project))
        if cursor.total is not None:
            await job.progress(0, cursor.total)
    while not cursor.finished:
        page = await jira.page(project, size, cursor.next_page_token)
        rows = knowledge_rows(page)
        try:
            cursor = cursor.after(page, len(rows))
        except PageMalformed as exc:
            raise JobFailed(f"jira answered project {project}'s search in an unexpected shape: {exc}") from exc
        done, total = cursor.progress()
        # I3: the page, the cursor and the progress land together, or (taken over) none of them.
        written = await job.write_page(SOURCE, project, rows, cursor.state(), done, total)
        if written.cancel_requested:
            raise JobCancelled(f"source sync of {project} cancelled after page {cursor.pages} ({cursor.issues} issues)")
    return {"project": project, "issues": cursor.issues, "pages": cursor.pages}


class _Jira:
    """Jira's search for one job: through the process's client (its User-Agent and stall hook), each
    request only while the job is still ours (`job.check()` before it and again at the last moment)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        settings = job.settings
        self.base = f"{settings.jira_url.rstrip('/')}/rest/api/3"
        self.headers = jira_auth(settings)
        self.ctx = CallContext(run_id=job.id, tool=NAME, args={}, key="", http=job.http, settings=settings,
                               before_send=job.check)  # fmt: skip

    async def count(self, project: str) -> int | None:
        """Jira's estimate of the project's issues, for the progress total; None when it will not say."""
        self.job.check()
        body = {"jql": f'project = "{project}"'}
        try:
            reply = await request(self.ctx, "jira", "POST", f"{self.base}/search/approximate-count", send=Send.READ,
                                  headers=self.headers, json=body)  # fmt: skip
        except VendorFailed as failed:
            log.info("job %s: no issue count for %s (%s); progress shows done only", self.job.id, project,
                     self._scrubbed(failed.outcome.error))  # fmt: skip
            return None
        count = reply.body.get("count") if isinstance(reply.body, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else None

    async def page(self, project: str, size: int, token: str | None) -> SearchPage:
        self.job.check()
        body: dict[str, Any] = {"jql": jql_for(project), "maxResults": size, "fields": list(FIELDS)}
        if token is not None:
            body["nextPageToken"] = token
        try:
            reply = await request(self.ctx, "jira", "POST", f"{self.base}/search/jql", send=Send.READ,
                                  headers=self.headers, json=body)  # fmt: skip
            return SearchPage.parse(reply.body)
        except VendorFailed as failed:
            raise JobFailed(f"jira search of {project} failed: {self._scrubbed(failed.outcome.error)}") from failed
        except PageMalformed as exc:
            raise JobFailed(f"jira answered project {project}'s search in an unexpected shape: {exc}") from exc

    def _scrubbed(self, error: str | None) -> str:
        text = error or "no answer"
        for secret in self.job.settings.secrets():
            text = text.replace(secret, "***")
        return text


KIND = JobKind(
    name=NAME,
    resumable=True,
    description="Pull every issue of a Jira project into the knowledge table (knowledge_search reads it).",
    check=check,
    run=run,
    unit="issues",
)
