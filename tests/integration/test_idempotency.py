"""Idempotency-Key on every POST that creates something (issue 7), over a real socket and a real Postgres:
runs, approvals' decisions and tokens each make their thing once per key, replay the first answer, refuse
another request under the key (422) and a repeat while the first is still answered (409). A key is its
token's own; a dead process's claim is taken over; the leader purges keys past their TTL.

A first request is held mid-answer by a lock another connection holds on what it writes: the test sees
it wait on that lock (pg_stat_activity), never a sleep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import waiting_approval
from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.locks import held, waiting_on_lock
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.entries.auth import TokenRequest
from ticketiq.intake.idempotency import request_hash
from ticketiq.leader.sweep import Sweeper
from ticketiq.storage.idempotency_store import IdempotencyStore, KeyRef

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"a": [READ, WRITE, {"text": "answered {jira_key}"}]}
AGENTS = {"a": {"tools": ["probe_read", "probe_write"]}}
KEY = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
RUN = {"agent": "a", "input": "check OPS-1"}


@asynccontextmanager
async def site(db_url: str, tmp: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Harness]]:
    # Writes of agent a wait for a person: its runs file approvals to decide.
    async with (
        engine_under_test(db_url, tmp, SCRIPTS, AGENTS, approval=["probe_write"]) as h,
        serving(create_app(h.settings, h.process)) as base,
        httpx.AsyncClient(verify=TLS, base_url=base, timeout=30) as client,
    ):
        yield client, h


async def as_(h: Harness, name: str, role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await h.token(name, role)}"}


async def keys(db_url: str) -> list[tuple[str, str, str, str]]:
    rows = await read_rows(db_url, "SELECT scope, principal, key, state FROM idempotency_keys ORDER BY 1, 2, 3")
    return [(r["scope"], r["principal"], r["key"], r["state"]) for r in rows]


async def count(db_url: str, sql: str, *params: Any) -> int:
    return int((await read_rows(db_url, f"SELECT count(*) AS n FROM ({sql}) t", *params))[0]["n"])


def names_the_header(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail[0]["loc"] == ["header", KEY]
    return str(detail[0]["msg"])


async def test_a_run_is_made_once_per_key_and_a_repeat_while_it_is_made_gets_the_first_answer(
    db_url: str, tmp_path: Path
) -> None:
    # POST /v1/runs takes no `once` (issue 19): the run's own key (runs.idempotency_key) is its dedupe, made
    # in the run's own commit, so there is no "still being answered" window and no 409. A repeat sent while
    # the first request's run is being made waits on that making and gets the same run, replayed.
    async with site(db_url, tmp_path) as (client, h):
        caller = {**await as_(h, "cal", "caller"), KEY: "run-1"}
        async with held(db_url, "LOCK TABLE runs IN EXCLUSIVE MODE"):
            first = asyncio.create_task(client.post("/v1/runs", json=RUN, headers=caller))
            await waiting_on_lock(db_url, "INSERT INTO runs")
            repeat = asyncio.create_task(client.post("/v1/runs", json=RUN, headers=caller))
            await eventually(lambda: lock_waits(db_url, "INSERT INTO runs", 2), what="both requests making the run")
            assert not first.done() and not repeat.done()
        answers = [await first, await repeat]
        assert [a.status_code for a in answers] == [201, 201], [a.text for a in answers]
        assert answers[0].content == answers[1].content  # the same run and status, byte for byte
        assert sorted(a.headers.get(REPLAYED, "") for a in answers) == ["", "true"]  # one made it, one replays
        answered = next(a for a in answers if REPLAYED not in a.headers)
        again = await client.post("/v1/runs", json=RUN, headers=caller)
        assert again.status_code == 201 and again.headers[REPLAYED] == "true"
        assert again.content == answered.content  # byte for byte
        assert answered.json()["status"] == "running"  # born taken here
        # The run went on (agent a's write waits for a person); a repeat still gets the first answer.
        run_id = answered.json()["id"]
        while (await client.get(f"/v1/runs/{run_id}", headers=caller)).json()["status"] != "waiting":
            await asyncio.sleep(0.05)
        assert (await client.post("/v1/runs", json=RUN, headers=caller)).content == answered.content
        other = await client.post("/v1/runs", json={**RUN, "input": "check OPS-2"}, headers=caller)
        assert "different request" in names_the_header(other, 422)
        assert await keys(db_url) == []  # no Idempotency-Key row: the run is its own record
    assert await count(db_url, "SELECT 1 FROM runs") == 1


async def lock_waits(db_url: str, statement_start: str, n: int) -> bool:
    rows = await read_rows(
        db_url,
        "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
        f"%{statement_start}%",
    )
    return int(rows[0]["n"]) >= n


async def test_a_decision_is_made_once_per_key_and_a_repeat_while_it_is_answered_is_409(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (client, h):
        operator = await as_(h, "opal", "operator")
        approval_id = await waiting_approval(client, operator, "check OPS-3")
        keyed = {**operator, KEY: "decide-1"}
        path = f"/v1/approvals/{approval_id}"
        async with held(db_url, "SELECT 1 FROM approvals WHERE id = %s FOR UPDATE", approval_id):
            first = asyncio.create_task(client.post(path, json={"decision": "approve"}, headers=keyed))
            await waiting_on_lock(db_url, "UPDATE approvals")
            repeat = await client.post(path, json={"decision": "approve"}, headers=keyed)
            assert "still being answered" in names_the_header(repeat, 409)
        answered = await first
        assert answered.status_code == 200 and answered.json()["decided_by"] == "opal"
        # The same decision sent again with no reason, or an empty one, is the same request.
        again = await client.post(path, json={"decision": "approve", "reason": ""}, headers=keyed)
        assert again.status_code == 200 and again.headers[REPLAYED] == "true"
        assert again.content == answered.content
        rejected = await client.post(path, json={"decision": "reject"}, headers=keyed)
        names_the_header(rejected, 422)
        # The same key and body on another approval asks something else.
        another = await waiting_approval(client, operator, "check OPS-4")
        names_the_header(
            await client.post(f"/v1/approvals/{another}", json={"decision": "approve"}, headers=keyed), 422
        )
        # Without a key the same decision by the same person again changes nothing and gets the decision
        # as it stands (I18); another decision is refused: it was decided once.
        same = await client.post(path, json={"decision": "approve"}, headers=operator)
        assert same.status_code == 200 and same.json() == answered.json() and REPLAYED not in same.headers
        assert (await client.post(path, json={"decision": "reject"}, headers=operator)).status_code == 409
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'approval.decided'") == 1


async def test_a_token_is_made_once_per_key_and_its_secret_is_never_kept_nor_shown_again(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = {**await as_(h, "root", "admin"), KEY: "token-1"}
        body = {"name": "newbie", "role": "caller", "agents": ["a"]}
        async with held(db_url, "LOCK TABLE api_tokens IN EXCLUSIVE MODE"):
            first = asyncio.create_task(client.post("/v1/tokens", json=body, headers=admin))
            await waiting_on_lock(db_url, "INSERT INTO api_tokens")
            repeat = await client.post("/v1/tokens", json=body, headers=admin)
            assert "still being answered" in names_the_header(repeat, 409)
        answered = await first
        assert answered.status_code == 201
        secret = answered.json()["token"]
        assert (await client.get("/v1/runs/00000000-0000-0000-0000-000000000000",
                                 headers={"Authorization": f"Bearer {secret}"})).status_code == 404  # fmt: skip
        # A repeat is told what its key made, never the secret: revoke that token and make another.
        again = await client.post("/v1/tokens", json=body, headers=admin)
        message = names_the_header(again, 409)
        assert again.headers[REPLAYED] == "true"
        assert "created token newbie" in message and "revoke" in message and secret not in again.text
        assert again.content == (await client.post("/v1/tokens", json=body, headers=admin)).content
        names_the_header(await client.post("/v1/tokens", json={**body, "name": "other"}, headers=admin), 422)
    assert await count(db_url, "SELECT 1 FROM api_tokens WHERE name = 'newbie'") == 1
    kept = await read_rows(db_url, "SELECT string_agg(k::text, ',') AS everything FROM idempotency_keys k")
    assert secret not in kept[0]["everything"] and tokens.token_hash(secret) not in kept[0]["everything"]


async def test_a_key_is_its_tokens_own_and_its_routes_own(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        one, other = await as_(h, "one", "admin"), await as_(h, "other", "admin")
        # Tokens: two admins, one key, two tokens.
        for who, name in ((one, "t-one"), (other, "t-other")):
            made = await client.post("/v1/tokens", json={"name": name, "role": "caller"}, headers={**who, KEY: "k"})
            assert made.status_code == 201 and REPLAYED not in made.headers
        # Decisions: two operators, one key, two approvals decided.
        for who, text in ((one, "check OPS-5"), (other, "check OPS-6")):
            approval_id = await waiting_approval(client, who, text)
            decided = await client.post(f"/v1/approvals/{approval_id}", json={"decision": "reject"},
                                        headers={**who, KEY: "k"})  # fmt: skip
            assert decided.status_code == 200 and REPLAYED not in decided.headers
        # Runs: the run's own key (runs.idempotency_key, atomic with its birth) is in its token's own
        # namespace (I19, run_keys.api): two tokens, one key, two runs, neither reaching the other's; each
        # token's repeat finds its own. It keeps no Idempotency-Key row (issue 19).
        first = await client.post("/v1/runs", json=RUN, headers={**one, KEY: "k"})
        second = await client.post("/v1/runs", json=RUN, headers={**other, KEY: "k"})
        assert first.status_code == second.status_code == 201 and first.json()["id"] != second.json()["id"]
        for who, made in ((one, first), (other, second)):
            again = await client.post("/v1/runs", json=RUN, headers={**who, KEY: "k"})
            assert again.headers[REPLAYED] == "true" and again.content == made.content
        assert await keys(db_url) == [
            ("POST /v1/approvals/{approval_id}", "one", "k", "done"),
            ("POST /v1/approvals/{approval_id}", "other", "k", "done"),
            ("POST /v1/tokens", "one", "k", "done"),
            ("POST /v1/tokens", "other", "k", "done"),
        ]
    assert await count(db_url, "SELECT 1 FROM api_tokens WHERE name IN ('t-one', 't-other')") == 2
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'approval.decided'") == 2
    keyed = await read_rows(db_url, "SELECT created_by FROM runs WHERE idempotency_key IS NOT NULL ORDER BY 1")
    assert keyed == [{"created_by": "one"}, {"created_by": "other"}]


async def test_the_claim_of_a_process_that_died_or_overran_is_taken_over(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        # A decision made, then its process died before it answered: its claim is held by no live process.
        approval_id = await waiting_approval(client, admin, "check OPS-7")
        path = f"/v1/approvals/{approval_id}"
        decided = await client.post(path, json={"decision": "reject"}, headers={**admin, KEY: "decide-dead"})
        await read_rows(db_url, "UPDATE idempotency_keys SET state = 'working', status_code = NULL, response = NULL, "
                                "answered_at = NULL, holder = 'dead-process', expires_at = now() + interval '60 s' "
                                "WHERE key = 'decide-dead'")  # fmt: skip
        again = await client.post(path, json={"decision": "reject"}, headers={**admin, KEY: "decide-dead"})
        # Answered again, not replayed: the decision as it stands, not made twice.
        assert again.status_code == 200 and REPLAYED not in again.headers
        assert again.json() == decided.json()
        # A token's creation whose claim lapsed (a live process that never answered it): taken over, made.
        body = {"name": "late", "role": "caller"}
        await read_rows(
            db_url,
            "INSERT INTO idempotency_keys (scope, principal, key, request_hash, state, holder, expires_at) "
            "VALUES ('POST /v1/tokens', 'root', 'token-lapsed', %s, 'working', %s, now() - interval '1 s')",
            request_hash(TokenRequest.model_validate(body).model_dump(mode="json")), h.engine.deps.holder,
        )  # fmt: skip
        late = await client.post("/v1/tokens", json=body, headers={**admin, KEY: "token-lapsed"})
        assert late.status_code == 201 and tokens.well_formed(late.json()["token"])
        holders = await read_rows(db_url, "SELECT key, state, holder FROM idempotency_keys ORDER BY key")
        assert holders == [{"key": key, "state": "done", "holder": h.engine.deps.holder}
                           for key in ("decide-dead", "token-lapsed")]  # fmt: skip
    assert await count(db_url, "SELECT 1 FROM audit_log WHERE action = 'approval.decided'") == 1


async def test_of_two_repeats_taking_over_one_claim_one_wins_and_the_overrun_request_cannot_undo_it(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as (_, h):
        store = IdempotencyStore(h.process.db)
        ref = KeyRef("POST /v1/runs", "root", "k")
        me = h.engine.deps.holder
        overrun = await store.claim(ref, "hash", me, 60)
        assert overrun is not None
        await read_rows(db_url, "UPDATE idempotency_keys SET expires_at = now() - interval '1 s'")
        taken = await asyncio.gather(*(store.take_over(ref, "hash", me, 60) for _ in range(4)))
        won = [t for t in taken if t is not None]
        assert len(won) == 1 and won[0].claimed_at > overrun.claimed_at
        # The request that overran its claim ends late: it neither frees nor answers the taker's claim.
        assert not await store.release(overrun)
        assert not await store.finish(overrun, 201, "{}")
        assert await store.take_over(ref, "other request", me, 60) is None
        assert await store.finish(won[0], 201, '{"id": "x"}')
        found = await store.get(ref)
        assert found is not None and (found.state, found.status_code, found.response) == ("done", 201, '{"id": "x"}')


async def test_a_refusal_frees_the_key_and_a_request_without_one_keeps_nothing(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        missing = await client.post("/v1/approvals/00000000-0000-0000-0000-000000000000", json={"decision": "approve"},
                                    headers={**admin, KEY: "k"})  # fmt: skip
        assert missing.status_code == 404
        unknown = await client.post("/v1/tokens", json={"name": "x", "role": "caller", "agents": ["nobody"]},
                                    headers={**admin, KEY: "k"})  # fmt: skip
        assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == ["body", "agents"]
        assert await keys(db_url) == []
        for _ in range(2):
            assert (await client.post("/v1/runs", json=RUN, headers=admin)).status_code == 201
        assert await keys(db_url) == []
    assert await count(db_url, "SELECT 1 FROM runs") == 2


async def test_a_malformed_key_is_refused_naming_the_header_and_nothing_is_written(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        for key, why in ((b"", "empty"), (b"x" * 256, "at most 255"), ("clé".encode(), "printable ASCII")):
            sent = {b"Authorization": admin["Authorization"].encode(), KEY.encode(): key}
            response = await client.post("/v1/runs", json=RUN, headers=sent)
            assert why in names_the_header(response, 422)
        assert await count(db_url, "SELECT 1 FROM runs") == 0
        assert await keys(db_url) == []
        longest = await client.post("/v1/runs", json=RUN, headers={**admin, KEY: "x" * 255})
        assert longest.status_code == 201


async def test_the_leader_purges_keys_past_their_ttl(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as (client, h):
        admin = await as_(h, "root", "admin")
        for key in ("old", "day-less-an-hour", "new"):
            made = await client.post("/v1/tokens", json={"name": f"t-{key}", "role": "caller"},
                                     headers={**admin, KEY: key})  # fmt: skip
            assert made.status_code == 201
        # A run keeps its key as long as the run (runs.idempotency_key), however old: no purge forgets it.
        run = await client.post("/v1/runs", json=RUN, headers={**admin, KEY: "old"})
        await read_rows(db_url, "UPDATE runs SET created_at = now() - interval '25 h'")
        await read_rows(db_url, "UPDATE idempotency_keys SET answered_at = now() - interval '25 h', "
                                "created_at = now() - interval '25 h' WHERE key = 'old'")  # fmt: skip
        await read_rows(db_url, "UPDATE idempotency_keys SET answered_at = now() - interval '23 h', "
                                "created_at = now() - interval '23 h' WHERE key = 'day-less-an-hour'")  # fmt: skip
        # A claim never answered, a day and more ago (its process died), and one being answered now.
        for key, age in (("claimed-long-ago", "25 h"), ("claimed-now", "0 s")):
            await read_rows(
                db_url,
                "INSERT INTO idempotency_keys (scope, principal, key, request_hash, state, holder, created_at, "
                "expires_at) VALUES ('POST /v1/tokens', 'root', %s, 'h', 'working', 'p', now() - %s::interval, "
                "now() - %s::interval + interval '60 s')",
                key, age, age,
            )  # fmt: skip
        assert h.settings.idempotency_ttl_s == 86400
        await Sweeper(h.engine, db_url).prune()
        assert [k for _, _, k, _ in await keys(db_url)] == ["claimed-now", "day-less-an-hour", "new"]
        # The purged key is forgotten: its request is answered afresh (the name is taken), not replayed.
        again = await client.post("/v1/tokens", json={"name": "t-old", "role": "caller"}, headers={**admin, KEY: "old"})
        assert again.status_code == 409 and REPLAYED not in again.headers
        assert again.json()["detail"][0]["loc"] == ["body", "name"]
        repeat = await client.post("/v1/runs", json=RUN, headers={**admin, KEY: "old"})
        assert repeat.headers[REPLAYED] == "true" and repeat.content == run.content
    assert await count(db_url, "SELECT 1 FROM runs") == 1
    assert await count(db_url, "SELECT 1 FROM api_tokens WHERE name LIKE %s", "t-%") == 3
