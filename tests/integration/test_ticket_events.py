"""Jira ticket events over a real socket and a real Postgres, with real signed requests.

`POST /v1/ticket-events` takes a Jira Cloud issue webhook signed `X-Hub-Signature: sha256=HMAC(body)`
with TICKETIQ_JIRA_WEBHOOK_SECRET. Each agent that opted in for the event (`on_ticket_events`) is
started once per event identifier, asked about the issue by key; a redelivery starts nothing, an event
no agent opted in to starts nothing, and a refused event stores nothing in any table.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.locks import held
from ticketiq.entries.api import create_app
from ticketiq.intake import signed_once, ticket_events
from ticketiq.storage.trigger_store import TriggerStore

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {
    "triager": [READ, {"text": "triaged {jira_key}"}],
    "watcher": [{"text": "watched {jira_key}"}],
    "reader": [{"text": "read {jira_key}"}],
}
AGENTS: dict[str, dict[str, Any]] = {
    "triager": {"tools": ["probe_read"], "on_ticket_events": ["jira:issue_created"]},
    "watcher": {"tools": [], "on_ticket_events": ["jira:issue_created", "jira:issue_updated"]},
    "reader": {"tools": []},
}
SECRET = "jira-webhook-secret-0123456789"
TABLES = ("runs", "checkpoints", "calls", "transcripts", "audit_log", "answers", "ticket_events",
          "trigger_deliveries", "idempotency_keys", "signed_requests")  # fmt: skip


def event(key: str = "OPS-41", name: str = "jira:issue_created", summary: str = "Checkout fails", **more: Any) -> bytes:
    """A Jira Cloud issue webhook's body, as Jira sends it (trimmed)."""
    return json.dumps({
        "timestamp": 1767225600000, "webhookEvent": name, "issue_event_type_name": "issue_created",
        "user": {"accountId": "5b10a2844c20165700ede21g", "displayName": "Ada"},
        "issue": {"id": "10041", "self": "https://acme.atlassian.net/rest/api/3/issue/10041", "key": key,
                  "fields": {"summary": summary, "status": {"name": "To Do"}}},
        "changelog": {"id": "10100", "items": []}, **more,
    }).encode()  # fmt: skip


def signed(body: bytes, identifier: str, secret: str = SECRET) -> dict[str, str]:
    mac = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature": f"sha256={mac}", "X-Atlassian-Webhook-Identifier": identifier,
            "content-type": "application/json"}  # fmt: skip


async def snapshot(db_url: str) -> dict[str, tuple[int, str]]:
    out = {}
    for table in TABLES:
        row = (await read_rows(db_url, f"SELECT count(*) AS n, md5(coalesce(string_agg(t::text, ',' ORDER BY "
                                       f"t::text), '')) AS digest FROM {table} t"))[0]  # fmt: skip
        out[table] = (int(row["n"]), str(row["digest"]))
    return out


@dataclass
class Site:
    client: httpx.AsyncClient
    admin: dict[str, str]
    h: Harness

    async def send(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return await self.client.post("/v1/ticket-events", content=body, headers=headers)

    async def ended(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = {}
        for _ in range(600):
            run = (await self.client.get(f"/v1/runs/{run_id}", headers=self.admin)).json()
            if run["status"] in ("succeeded", "failed"):
                return run
            await asyncio.sleep(0.05)
        raise AssertionError(f"run {run_id} never ended: {run}")


@asynccontextmanager
async def site(db_url: str, tmp: Path, **kw: Any) -> AsyncIterator[Site]:
    kw.setdefault("jira_webhook_secret", SECRET)
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, **kw) as h:
        admin = {"Authorization": f"Bearer {await h.token('root', 'admin')}"}
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(verify=TLS, base_url=base) as client,
        ):
            yield Site(client, admin, h)


async def test_each_agent_that_opted_in_is_started_once_per_event_and_a_redelivery_starts_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        body = event()
        taken = await s.send(body, signed(body, "ev-1"))
        assert taken.status_code == 202, taken.text
        runs = taken.json()["runs"]
        assert sorted(runs) == ["triager", "watcher"] and sorted(taken.json()["run_ids"]) == sorted(runs.values())
        for agent, answer in (("triager", "triaged OPS-41"), ("watcher", "watched OPS-41")):
            run = await s.ended(runs[agent])
            assert (run["status"], run["answer"], run["channel"], run["may_wait"], run["created_by"]) == (
                "succeeded", answer, "ticket_event", False, "jira:webhook",
            )  # fmt: skip
            entries = (await s.client.get(f"/v1/runs/{runs[agent]}/transcript", headers=s.admin)).json()["entries"]
            assert [e["input"] for e in entries if e["kind"] == "input"] == [
                "Jira issue_created for OPS-41: Checkout fails"
            ]
            assert [e["text"] for e in entries if e["kind"] == "answer"] == [answer]
        asked = len(s.h.asked)

        # Jira retries with the same identifier; a replay of the signed body under a made-up identifier
        # (Jira does not sign that header) is found by the body: neither starts anything.
        for identifier in ("ev-1", "ev-1", "forged-2"):
            again = await s.send(body, signed(body, identifier))
            assert (again.status_code, again.json()["runs"]) == (202, runs), identifier
        # An update starts only the agent that opted in for updates; a deletion nobody opted in to, none.
        updated = event(name="jira:issue_updated", summary="Checkout still fails")
        update = await s.send(updated, signed(updated, "ev-3"))
        assert update.status_code == 202 and sorted(update.json()["runs"]) == ["watcher"]
        deleted = event(name="jira:issue_deleted")
        nobody = await s.send(deleted, signed(deleted, "ev-4"))
        assert (nobody.status_code, nobody.json()) == (202, {"run_ids": [], "runs": {}})
        await s.ended(update.json()["runs"]["watcher"])
        assert len(s.h.asked) == asked + 1  # the update's one step, nothing of the redeliveries
    rows = await read_rows(db_url, "SELECT event_id, agent, webhook_event, issue_key FROM ticket_events "
                                   "ORDER BY event_id, agent")  # fmt: skip
    assert rows == [
        {"event_id": "ev-1", "agent": "triager", "webhook_event": "jira:issue_created", "issue_key": "OPS-41"},
        {"event_id": "ev-1", "agent": "watcher", "webhook_event": "jira:issue_created", "issue_key": "OPS-41"},
        {"event_id": "ev-3", "agent": "watcher", "webhook_event": "jira:issue_updated", "issue_key": "OPS-41"},
    ]
    assert len(await read_rows(db_url, "SELECT 1 FROM runs")) == 3
    keys = await read_rows(db_url, "SELECT idempotency_key FROM runs ORDER BY idempotency_key")
    assert [k["idempotency_key"] for k in keys] == ["ticket_event\tev-1\ttriager", "ticket_event\tev-1\twatcher",
                                                    "ticket_event\tev-3\twatcher"]  # fmt: skip


async def test_a_refused_event_is_4xx_naming_what_is_wrong_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        before = await snapshot(db_url)
        body = event()
        no_key = event(issue={"id": "1", "fields": {"summary": "x"}})
        cases: list[tuple[str, bytes, dict[str, str], int, list[str]]] = [
            ("signed with another secret", body, signed(body, "ev-9", "not-the-secret-0123456789"), 401,
             ["header", "X-Hub-Signature"]),
            ("another body signed", body, signed(event(key="OPS-42"), "ev-9"), 401, ["header", "X-Hub-Signature"]),
            ("no signature", body, {"X-Atlassian-Webhook-Identifier": "ev-9"}, 401, ["header", "X-Hub-Signature"]),
            ("a bearer token is no signature", body, {"X-Atlassian-Webhook-Identifier": "ev-9", **s.admin}, 401,
             ["header", "X-Hub-Signature"]),
            ("malformed signature", body, {"X-Hub-Signature": "sha1=abc", "X-Atlassian-Webhook-Identifier": "e"},
             401, ["header", "X-Hub-Signature"]),
            ("no identifier", body, {"X-Hub-Signature": signed(body, "x")["X-Hub-Signature"]}, 422,
             ["header", "X-Atlassian-Webhook-Identifier"]),
            ("not JSON", b"issue OPS-41 created", signed(b"issue OPS-41 created", "ev-9"), 400, ["body"]),
            ("no issue key", no_key, signed(no_key, "ev-9"), 422, ["body", "issue", "key"]),
        ]  # fmt: skip
        for why, sent, headers, status, loc in cases:
            response = await s.send(sent, headers)
            assert response.status_code == status, (why, response.text)
            assert response.json()["detail"][0]["loc"] == loc, (why, response.text)
        assert await snapshot(db_url) == before
        assert s.h.asked == []


async def test_without_the_secret_configured_every_event_is_refused(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path, jira_webhook_secret=None) as s:
        body = event()
        refused = await s.send(body, signed(body, "ev-1"))
        assert refused.status_code == 401
        assert "TICKETIQ_JIRA_WEBHOOK_SECRET is unset" in refused.json()["detail"][0]["msg"]
    assert await read_rows(db_url, "SELECT 1 FROM runs") == []


async def test_a_run_made_before_its_process_died_unrecorded_is_found_again_not_made_twice(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        # The process died after making the triager's run (not started), before recording it.
        made = await s.h.engine.submit(
            "triager", "Jira issue_created for OPS-43: Disk full", may_wait=False, channel="ticket_event",
            actor="jira:webhook", idempotency_key=ticket_events.run_key("ev-7", "triager"), start=False,
        )  # fmt: skip
        body = event(key="OPS-43", summary="Disk full")
        retried = await s.send(body, signed(body, "ev-7"))
        assert retried.status_code == 202, retried.text
        assert retried.json()["runs"]["triager"] == made.id
        await s.ended(retried.json()["runs"]["watcher"])
    assert len(await read_rows(db_url, "SELECT 1 FROM runs")) == 2
    assert len(await read_rows(db_url, "SELECT 1 FROM ticket_events WHERE event_id = 'ev-7'")) == 2


async def test_two_concurrent_deliveries_of_one_body_under_two_identifiers_start_one_set_of_runs(
    db_url: str, tmp_path: Path
) -> None:
    # Jira does not sign the identifier: one signed body sent twice at once under two identifiers (a
    # replay racing the original, or two Jira webhooks for one event) is one event. Each copy is held
    # where it would record its runs, so both are in flight together; a copy refused earlier is done.
    async with site(db_url, tmp_path) as s:
        body = event(key="OPS-44", summary="Queue stuck")
        async with held(db_url, "LOCK TABLE ticket_events IN SHARE MODE"):
            sent = [asyncio.create_task(s.send(body, signed(body, identifier))) for identifier in ("ev-a", "ev-b")]

            async def both_in_flight() -> bool:
                rows = await read_rows(db_url, "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = "
                                               "'Lock' AND query LIKE %s", "%INSERT INTO ticket_events%")  # fmt: skip
                return int(rows[0]["n"]) + sum(t.done() for t in sent) == len(sent)

            await eventually(both_in_flight, what="both copies held or answered")
        answers = await asyncio.gather(*sent)
        assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
        rows = await read_rows(
            db_url, "SELECT event_id, agent, run_id::text AS run_id FROM ticket_events ORDER BY agent"
        )
        assert len({r["event_id"] for r in rows}) == 1 and [r["agent"] for r in rows] == ["triager", "watcher"], rows
        first = rows[0]["event_id"]
        for identifier, answer in zip(("ev-a", "ev-b"), answers, strict=True):
            # The first copy answers its runs; the other, the runs the first had recorded when it was answered.
            if identifier == first:
                assert answer.json()["runs"] == {r["agent"]: r["run_id"] for r in rows}
            else:
                assert set(answer.json()["runs"].items()) <= {(r["agent"], r["run_id"]) for r in rows}
        for r in rows:
            await s.ended(r["run_id"])
    assert len(await read_rows(db_url, "SELECT 1 FROM runs")) == 2


async def test_an_event_recorded_for_one_agent_before_its_process_died_starts_the_others_when_sent_again(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        body = event(key="OPS-45", summary="Disk full")
        # The process claimed the body, made and recorded the triager's run (not started), then died.
        store = TriggerStore(s.h.process.db)
        claim = signed_once.ticket_event_claim("ev-8", body)
        assert await store.claim_signed(claim.source, claim.digest, "ev-8", None) == ("ev-8", False)
        made = await s.h.engine.submit(
            "triager", "Jira issue_created for OPS-45: Disk full", may_wait=False, channel="ticket_event",
            actor="jira:webhook", idempotency_key=ticket_events.run_key("ev-8", "triager"), start=False,
        )  # fmt: skip
        await store.record_event_run("ev-8", "triager", made.id, "jira:issue_created", "OPS-45", claim.digest)
        retried = await s.send(body, signed(body, "ev-8"))
        assert retried.status_code == 202, retried.text
        runs = retried.json()["runs"]
        assert sorted(runs) == ["triager", "watcher"] and runs["triager"] == made.id
        await s.ended(runs["watcher"])
        # The same body under another identifier still starts nothing.
        replayed = await s.send(body, signed(body, "ev-9"))
        assert (replayed.status_code, replayed.json()["runs"]) == (202, runs)
        # An event no agent opted in to claims and stores nothing.
        before = await snapshot(db_url)
        deleted = event(key="OPS-45", name="jira:issue_deleted")
        assert (await s.send(deleted, signed(deleted, "ev-10"))).json() == {"run_ids": [], "runs": {}}
        assert await snapshot(db_url) == before
    assert len(await read_rows(db_url, "SELECT 1 FROM runs")) == 2
