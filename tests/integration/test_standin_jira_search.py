"""The Jira stand-in's enhanced JQL search and its generated projects, over raw HTTP on real sockets:
pages in key order by an opaque token, the last page without one, Jira's refusals, and a project of
generated issues whose text and labels read the same every time."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.http import TLS
from tests.support.standins import Standins

BEARER = {"Authorization": "Bearer test-token"}
JQL = "project = OPS ORDER BY key ASC"


def jira(standins: Standins) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=TLS, base_url=standins.base_url + "/jira/rest/api/3", headers=BEARER, timeout=30)


async def every_page(c: httpx.AsyncClient, body: dict[str, Any]) -> list[dict[str, Any]]:
    pages: list[dict[str, Any]] = []
    token = None
    while True:
        answer = await c.post("/search/jql", json={**body, **({"nextPageToken": token} if token else {})})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        pages.append(page)
        if page["isLast"]:
            assert "nextPageToken" not in page  # as Jira Cloud answers its last page
            return pages
        token = page["nextPageToken"]


async def test_a_generated_project_pages_in_key_order_to_the_last_page_each_issue_once(standins: Standins) -> None:
    made = await standins.jira_project("OPS", 250)
    assert made == {"project": "OPS", "generated": 250, "issues": 250}
    async with jira(standins) as c:
        pages = await every_page(c, {"jql": JQL, "maxResults": 40, "fields": ["summary", "labels"]})
        count = (await c.post("/search/approximate-count", json={"jql": "project = OPS"})).json()
    keys = [i["key"] for p in pages for i in p["issues"]]
    # Issue-number order (OPS-9 before OPS-10), not text order.
    assert keys == [f"OPS-{n}" for n in range(1, 251)]
    assert [len(p["issues"]) for p in pages] == [40] * 6 + [10]
    assert count == {"count": 250}
    first = pages[0]["issues"][0]
    assert set(first["fields"]) == {"summary", "labels"}
    assert first["fields"]["labels"][0] in {"network", "database", "auth", "billing"}


async def test_the_default_fields_are_the_id_only_and_a_get_pages_like_a_post(standins: Standins) -> None:
    await standins.jira_project("ABC", 7)
    async with jira(standins) as c:
        plain = (await c.get("/search/jql", params={"jql": "project = ABC", "maxResults": 5})).json()
        rest = await c.get(
            "/search/jql", params={"jql": "project = ABC", "maxResults": 5, "nextPageToken": plain["nextPageToken"]}
        )
        descending = (await c.get("/search/jql", params={"jql": "project = abc order by key desc"})).json()
    assert [set(i) for i in plain["issues"]] == [{"id", "key", "self"}] * 5
    assert plain["isLast"] is False
    assert [i["key"] for i in rest.json()["issues"]] == ["ABC-6", "ABC-7"]
    assert rest.json()["isLast"] is True
    assert [i["key"] for i in descending["issues"]] == [f"ABC-{n}" for n in range(7, 0, -1)]


async def test_generated_issues_read_the_same_every_time_and_through_the_issue_route(standins: Standins) -> None:
    await standins.jira_project("OPS", 3)
    async with jira(standins) as c:
        found = (await c.post("/search/jql", json={"jql": JQL, "fields": ["*all"]})).json()["issues"]
        again = await standins.jira_project("OPS", 3)  # generating again changes nothing
        issue = (await c.get("/issue/OPS-2")).json()
    assert again["issues"] == 3
    assert found[1]["fields"] == issue["fields"]
    assert issue["fields"]["summary"] and issue["fields"]["labels"]
    assert issue["fields"]["created"].endswith("+0000")


async def test_unbounded_or_foreign_queries_and_forged_tokens_are_refused_as_jira_refuses_them(
    standins: Standins,
) -> None:
    await standins.jira_project("OPS", 5)
    async with jira(standins) as c:
        unbounded = await c.post("/search/jql", json={"jql": "ORDER BY key ASC"})
        other = await c.post("/search/jql", json={"jql": "assignee = me"})
        first = (await c.post("/search/jql", json={"jql": JQL, "maxResults": 2})).json()
        # A token is bound to its query: another project's search cannot use it.
        crossed = await c.post("/search/jql", json={"jql": "project = ABC", "nextPageToken": first["nextPageToken"]})
        forged = await c.post("/search/jql", json={"jql": JQL, "nextPageToken": "not-a-token"})
        bad_size = await c.get("/search/jql", params={"jql": JQL, "maxResults": "many"})
        legacy = await c.get("/search", params={"jql": JQL, "startAt": 0})
    for refused in (unbounded, other, crossed, forged, bad_size):
        assert refused.status_code == 400, refused.text
        assert refused.json()["errorMessages"]
    assert "Unbounded" in unbounded.json()["errorMessages"][0]
    assert "invalid or expired" in forged.json()["errorMessages"][0]
    # The startAt/total search was removed from Jira Cloud: 410 Gone, pointing at search/jql.
    assert legacy.status_code == 410 and "/rest/api/3/search/jql" in legacy.json()["errorMessages"][0]


async def test_a_project_key_that_is_no_key_is_not_generated(standins: Standins) -> None:
    answer = await standins.admin.post("/_standin/jira/projects/ops-1/generate", json={"count": 3})
    too_many = await standins.admin.post("/_standin/jira/projects/OPS/generate", json={"count": 0})
    assert answer.status_code == 422
    assert too_many.status_code == 422
