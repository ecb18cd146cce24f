"""Source sync through the API, against the Jira stand-in over real sockets and the real Postgres
(issue 10 part 2; I3, I13, I16): a generated project pulled into the knowledge table page by page,
each page's rows and cursor in one fenced statement, and `knowledge_search` finding what was synced.

Whether a row was written twice is read from Postgres itself: every statement writes its rows under
its own transaction id (`xmin`), and an upsert that rewrote a row would give it a new one. So a sync
whose pages were each written once holds exactly as many distinct `xmin` as it has pages, and rows
written before a loss keep theirs through the resume.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, kill_liveness, read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins
from ticketiq.entries.api import create_app
from ticketiq.errors import JobLost
from ticketiq.standins.vendors.jira_corpus import generated_issue
from ticketiq.storage.job_store import JobStore
from ticketiq.tools.base import CallContext
from ticketiq.tools.registry import build_registry

LIBRARIAN: list[dict[str, Any]] = [
    {"calls": [{"tool": "knowledge_search", "arguments": {"query": "{input}", "project": "OPS"}}]},
    {"text": "Best match: {result:knowledge_search.matches.0.key|none}"},
]
SCRIPTS: dict[str, list[dict[str, Any]]] = {"librarian": LIBRARIAN}
AGENTS: dict[str, dict[str, Any]] = {"librarian": {"tools": ["knowledge_search"]}}


@asynccontextmanager
async def app_process(db_url: str, tmp: Path, standins: Standins, name: str = "a", **kw: Any) -> AsyncIterator[Harness]:
    folder = tmp / name
    folder.mkdir(exist_ok=True)
    jira = standins.settings_env["TICKETIQ_JIRA_URL"]
    async with engine_under_test(db_url, folder, SCRIPTS, AGENTS, jira_url=jira, jira_token="t0ken", **kw) as h:
        yield h


@asynccontextmanager
async def api(h: Harness) -> AsyncIterator[httpx.AsyncClient]:
    token = await h.token("ops", "operator")
    async with (
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(
            verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
        ) as client,
    ):
        yield client


async def sync(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    made = await client.post("/v1/jobs", json={"kind": "source_sync", "params": params})
    assert made.status_code == 201, made.text
    job: dict[str, Any] = made.json()
    return job


async def job_row(db_url: str, job_id: str) -> dict[str, Any]:
    return (await read_rows(db_url, "SELECT * FROM jobs WHERE id = %s", job_id))[0]


async def ends(db_url: str, job_id: str, timeout_s: float = 120.0) -> dict[str, Any]:
    async def ended() -> bool:
        return (await job_row(db_url, job_id))["status"] in ("succeeded", "failed", "cancelled", "interrupted")

    await eventually(ended, timeout_s, f"job {job_id} ending")
    return await job_row(db_url, job_id)


async def knowledge(db_url: str) -> list[dict[str, Any]]:
    """Every knowledge row with the transaction that last wrote it."""
    return await read_rows(db_url, "SELECT key, project, title, labels, job_id::text AS job_id, xmin::text AS xmin "
                                   "FROM knowledge ORDER BY key")  # fmt: skip


async def searches_left(standins: Standins) -> int:
    """What remains of the stalled-search fault: each search the stand-in answered took one."""
    pending = (await standins.admin.get("/_standin/faults")).json()
    return sum(f["count"] for f in pending if f["operation"] == "search")


async def test_a_project_is_synced_each_issue_once_and_agents_find_it(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    await standins.jira_project("OPS", 230)
    await standins.jira_project("ABC", 20)  # another project: not synced
    async with app_process(db_url, tmp_path, standins) as h, api(h) as client:
        made = await sync(client, project="OPS")
        assert made["params"] == {"source": "jira", "project": "OPS", "page_size": 50}
        row = await ends(db_url, made["id"])
        assert row["status"] == "succeeded", row["error"]
        shown = (await client.get(f"/v1/jobs/{made['id']}")).json()
        assert shown["result"] == {"project": "OPS", "issues": 230, "pages": 5}
        assert shown["progress"] == {"done": 230, "total": 230, "unit": "issues"}
        rows = await knowledge(db_url)
        assert [r["key"] for r in rows] == sorted(f"OPS-{n}" for n in range(1, 231))
        assert {r["job_id"] for r in rows} == {made["id"]}
        assert len({r["xmin"] for r in rows}) == 5  # one statement per page, none written again
        wanted = generated_issue("OPS", 17)
        seventeen = next(r for r in rows if r["key"] == "OPS-17")
        assert (seventeen["title"], seventeen["labels"]) == (wanted.summary, list(wanted.labels))

        # An agent offered knowledge_search finds a synced issue by the words of its title.
        run_id = await h.run("librarian", wanted.summary)
        run = await h.finish(run_id)
        assert run["status"] == "succeeded"
        best = run["answer"].removeprefix("Best match: ")
        assert best in {r["key"] for r in rows if r["title"] == wanted.summary}


async def test_knowledge_search_ranks_filters_and_limits(db_url: str, tmp_path: Path, standins: Standins) -> None:
    await standins.jira_project("OPS", 120)
    await standins.jira_project("ABC", 40)
    async with app_process(db_url, tmp_path, standins) as h, api(h) as client:
        for project in ("OPS", "ABC"):
            ended = await ends(db_url, (await sync(client, project=project, page_size=100))["id"])
            assert ended["status"] == "succeeded", ended["error"]
        registry = build_registry(h.settings, h.process.db)
        tool = registry.tools["knowledge_search"]

        def context(args: dict[str, Any]) -> CallContext:
            return CallContext(run_id="t", tool=tool.name, args=args, key="k", http=h.process.http, settings=h.settings)

        async def search(**args: Any) -> Any:
            outcome = await tool.executor(context(args))
            assert outcome.ok, outcome.error
            return outcome.result["matches"]

        replication = await search(query="replication lag replica", limit=25)
        assert replication and all("database" in m["labels"] for m in replication)
        assert [m["rank"] for m in replication] == sorted((m["rank"] for m in replication), reverse=True)
        assert {m["project"] for m in replication} == {"OPS", "ABC"}
        assert {m["project"] for m in await search(query="replication lag replica", project="ABC")} == {"ABC"}
        assert len(await search(query="replica", limit=2)) == 2
        assert len(await search(query="replica")) == 5  # the default limit
        phrase = await search(query='"charged twice"', limit=25)
        assert phrase and all("charged twice" in m["title"] for m in phrase)
        without = await search(query="invoice -blank", limit=25)
        assert without and all("blank" not in m["title"].lower() for m in without)
        assert all(m["snippet"] for m in phrase)
        assert await search(query="zzzunmatchedwordzzz") == []
        refused = await tool.executor(context({"query": "x", "limit": 500}))
        assert not refused.ok and "limit" in (refused.error or "")


async def test_bad_params_are_refused_naming_the_field_and_no_job_is_made(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins, job_concurrency=0) as h, api(h) as client:
        for params, loc in (
            ({"project": "ops"}, ["body", "params", "project"]),
            ({}, ["body", "params", "project"]),
            ({"project": "OPS", "page_size": 500}, ["body", "params", "page_size"]),
            ({"project": "OPS", "source": "github"}, ["body", "params", "source"]),
            ({"project": "OPS", "jql": "order by key"}, ["body", "params", "jql"]),
        ):
            refused = await client.post("/v1/jobs", json={"kind": "source_sync", "params": params})
            assert refused.status_code == 422, (params, refused.text)
            assert refused.json()["detail"][0]["loc"] == loc, params
    assert await read_rows(db_url, "SELECT 1 FROM jobs") == []


@pytest.mark.long
async def test_a_sync_whose_process_lost_it_goes_on_from_the_page_after_the_last_written(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    await standins.jira_project("OPS", 600)
    # Each page takes a while at Jira, so the loss lands mid-sync.
    await standins.fault("jira", "stall", stall_s=0.1, count=10_000, operation="search")
    async with (
        app_process(db_url, tmp_path, standins, "a", lead=False),
        app_process(db_url, tmp_path, standins, "b", lead=True) as b,
        api(b) as client,
    ):
        made = await sync(client, project="OPS", page_size=20)

        async def some_pages_written() -> bool:
            return int((await job_row(db_url, made["id"]))["progress_done"]) >= 100

        await eventually(some_pages_written, 60, "the sync writing some pages")
        runner = (await job_row(db_url, made["id"]))["holder"]
        await kill_liveness(db_url, runner)

        async def taken_back() -> bool:
            return int((await job_row(db_url, made["id"]))["attempt"]) >= 2

        await eventually(taken_back, 60, "the lost sync taken back")
        # Whatever the lost attempt wrote is final now: its statements are fenced off.
        before = {r["key"]: r["xmin"] for r in await knowledge(db_url)}
        row = await ends(db_url, made["id"])
        assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), row["error"]
        assert row["result"] == {"project": "OPS", "issues": 600, "pages": 30}
        assert (row["progress_done"], row["progress_total"]) == (600, 600)
        rows = await knowledge(db_url)
        assert [r["key"] for r in rows] == sorted(f"OPS-{n}" for n in range(1, 601))
        # No row was written twice: those of the pages before the loss kept the statement that wrote them,
        # and every page was written by exactly one statement.
        assert before and all(r["xmin"] == before[r["key"]] for r in rows if r["key"] in before)
        assert len({r["xmin"] for r in rows}) == 30


async def test_a_page_whose_attempt_was_raised_while_it_waited_writes_nothing_and_no_more_is_asked(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    """I3: the page's statement waits on the row lock of a concurrent takeover, which raises the attempt
    and commits; the statement then matches nothing: none of the page's rows and no cursor is written,
    and the job asks Jira for no further page."""
    await standins.jira_project("OPS", 400)
    await standins.fault("jira", "stall", stall_s=0.05, count=10_000, operation="search")
    async with app_process(db_url, tmp_path, standins, lead=False) as h, api(h) as client:
        made = await sync(client, project="OPS", page_size=10)

        async def a_page_written() -> bool:
            return int((await job_row(db_url, made["id"]))["progress_done"]) >= 30

        await eventually(a_page_written, 60, "the sync writing a few pages")
        async with await psycopg.AsyncConnection.connect(db_url) as takeover, takeover.transaction():
            await takeover.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (made["id"],))

            async def page_waits() -> bool:
                rows = await read_rows(db_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                               "AND query LIKE '%%INSERT INTO knowledge%%'")  # fmt: skip
                return bool(rows)

            await eventually(page_waits, 30, "the page's statement waiting on the takeover's lock")
            await takeover.execute("UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", (made["id"],))

        await eventually(lambda: _stopped(h, made["id"]), 30, "the fenced sync stopping")
        row = await job_row(db_url, made["id"])
        assert (row["status"], row["attempt"], row["finished_at"]) == ("running", 2, None)
        written = row["state"]
        rows = await knowledge(db_url)
        # The fenced page wrote nothing: the rows are exactly those of the pages the cursor counts.
        assert len(rows) == written["issues"] == row["progress_done"] == 10 * written["pages"]
        assert [r["key"] for r in rows] == sorted(f"OPS-{n}" for n in range(1, written["issues"] + 1))
        # Jira was asked for each written page and the fenced one, and for nothing after it.
        assert 10_000 - await searches_left(standins) == written["pages"] + 1


async def test_the_page_statement_raised_underneath_matches_nothing_and_writes_nothing(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    async with app_process(db_url, tmp_path, standins, job_concurrency=0) as h:
        store = JobStore(h.process.db)
        job_id = str(uuid.uuid4())
        await store.create(job_id, "source_sync", {"source": "jira", "project": "OPS", "page_size": 50}, True, "ops")
        (claimed,) = await store.claim(h.engine.deps.holder, 8.0, 1)
        state = {"next_page_token": "p2", "pages": 1, "issues": 1}
        issues: list[dict[str, Any]] = [
            {"key": "OPS-1", "title": "t", "body": "b", "labels": [], "status": None, "updated_at": None}
        ]
        stale = store.handle(job_id, claimed.attempt, h.engine.deps.holder)
        await read_rows(db_url, "UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", job_id)
        with pytest.raises(JobLost):
            await stale.write_page("jira", "OPS", issues, state, 1, None)
        assert await knowledge(db_url) == []
        assert (await job_row(db_url, job_id))["state"] == {}
        # The attempt that holds it now writes the same page.
        current = store.handle(job_id, claimed.attempt + 1, h.engine.deps.holder)
        written = await current.write_page("jira", "OPS", issues, state, 1, None)
        assert (written.written, written.cancel_requested) == (1, False)
        assert [r["key"] for r in await knowledge(db_url)] == ["OPS-1"]


async def test_a_cancelled_sync_ends_cancelled_after_a_whole_page(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    await standins.jira_project("OPS", 300)
    await standins.fault("jira", "stall", stall_s=0.05, count=10_000, operation="search")
    async with app_process(db_url, tmp_path, standins) as h, api(h) as client:
        made = await sync(client, project="OPS", page_size=10)

        async def a_page_written() -> bool:
            return int((await job_row(db_url, made["id"]))["progress_done"]) >= 20

        await eventually(a_page_written, 60, "the sync writing a few pages")
        assert (await client.post(f"/v1/jobs/{made['id']}/cancel")).status_code == 202
        row = await ends(db_url, made["id"])
        assert row["status"] == "cancelled", row["error"]
        assert len(await knowledge(db_url)) == row["state"]["issues"] == 10 * row["state"]["pages"] < 300


async def _stopped(h: Harness, job_id: str) -> bool:
    return job_id not in h.process.jobs.slots
