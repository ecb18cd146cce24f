"""The vendor stand-ins behave like the vendors where it matters: what dedupes, for how long, how a
write is found again, and what every write came to in `standin.writes`. Raw HTTP, real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import httpx

from tests.support.http import TLS
from tests.support.standins import Standins, serve_standins
from ticketiq.dbserver.authentication import password_of
from ticketiq.standins.vendors.botframework import APP_ID, APP_PASSWORD, CONNECTOR_SCOPE, GRAPH_SCOPE

BEARER = {"Authorization": "Bearer test-token"}
SQS = {"X-Amz-Target": "AmazonSQS.SendMessage", "Content-Type": "application/x-amz-json-1.0", **BEARER}
THREAD = "19:ops@thread.tacv2;messageid=1700000000000"


def client(standins: Standins, prefix: str, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=TLS, base_url=standins.base_url + prefix, headers=headers or BEARER, timeout=30)


def incident(key: str, **fields: Any) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "visibility": "public",
        "name": "db down",
        "severity_id": "sev_minor",
        **fields,
    }


def sqs_send(dedup_id: str, body: str = "hello") -> dict[str, Any]:
    return {
        "QueueUrl": "http://x/sqs/000000000000/ops.fifo",
        "MessageBody": body,
        "MessageGroupId": "OPS-1",
        "MessageDeduplicationId": dedup_id,
    }


async def bot_token(standins: Standins, scope: str) -> dict[str, str]:
    """The stand-in bot's Authorization header for `scope`, by the client-credentials grant."""
    form = {"grant_type": "client_credentials", "client_id": APP_ID, "client_secret": APP_PASSWORD, "scope": scope}
    response = await standins.admin.post("/login/botframework.com/oauth2/v2.0/token", data=form)
    response.raise_for_status()
    return {"Authorization": f"Bearer {response.json()['access_token']}"}


async def effects(standins: Standins, **filters: str) -> list[str]:
    return [w["effect"] for w in await standins.writes(**filters)]


async def test_incidentio_refuses_an_active_incident_without_severity_in_its_error_envelope(
    standins: Standins,
) -> None:
    async with client(standins, "/incidentio") as c:
        no_severity = await c.post("/v2/incidents", json=incident("k1", severity_id=None))
        no_key = await c.post("/v2/incidents", json={"visibility": "public", "severity_id": "sev_minor"})
    assert no_severity.status_code == 422
    body = no_severity.json()
    assert (body["type"], body["status"]) == ("validation_error", 422)
    assert body["request_id"]
    assert body["errors"][0]["source"]["field"] == "severity_id"
    assert no_key.json()["errors"][0]["source"]["field"] == "idempotency_key"
    assert await effects(standins, vendor="incidentio") == ["refused", "refused"]


async def test_incidentio_repeated_key_returns_the_original_or_an_error_as_set(standins: Standins) -> None:
    async with client(standins, "/incidentio") as c:
        first = await c.post("/v2/incidents", json=incident("k1"))
        again = await c.post("/v2/incidents", json=incident("k1", name="other name"))
        await standins.options(incidentio_repeat="error")
        refused = await c.post("/v2/incidents", json=incident("k1"))
        listed = (await c.get("/v2/incidents")).json()["incidents"]
    assert first.status_code == again.status_code == 201
    assert again.json()["incident"]["id"] == first.json()["incident"]["id"]
    assert again.json()["incident"]["name"] == "db down"
    assert refused.status_code == 409
    assert refused.json()["errors"][0]["source"]["field"] == "idempotency_key"
    assert len(listed) == 1
    assert await effects(standins, vendor="incidentio", key="k1") == ["applied", "deduped", "deduped"]


async def test_incidentio_list_hides_test_incidents_and_filters_by_creation(standins: Standins) -> None:
    async with client(standins, "/incidentio") as c:
        real = (await c.post("/v2/incidents", json=incident("k1"))).json()["incident"]
        await c.post("/v2/incidents", json=incident("k2", mode="test"))
        default = (await c.get("/v2/incidents")).json()["incidents"]
        both = (await c.get("/v2/incidents", params={"mode[one_of]": ["standard", "test"]})).json()["incidents"]
        since = {"created_at[gte]": real["created_at"]}
        from_then = (await c.get("/v2/incidents", params=since)).json()["incidents"]
        later = {"created_at[gte]": "2999-01-01T00:00:00Z"}
        from_later = (await c.get("/v2/incidents", params=later)).json()["incidents"]
    assert [i["id"] for i in default] == [real["id"]]
    assert len(both) == 2
    assert [i["id"] for i in from_then] == [real["id"]]
    assert from_later == []


async def test_incidentio_edit_changes_only_the_fields_given(standins: Standins) -> None:
    async with client(standins, "/incidentio") as c:
        made = (await c.post("/v2/incidents", json=incident("k1", summary="first"))).json()["incident"]
        edit = {"incident": {"incident_status_id": "st_fixing"}, "notify_incident_channel": False}
        edited = await c.post(f"/v2/incidents/{made['id']}/actions/edit", json=edit)
        read = (await c.get(f"/v2/incidents/{made['id']}")).json()["incident"]
    assert edited.status_code == 200
    assert read["incident_status"]["name"] == "Fixing"
    assert (read["summary"], read["severity"]["id"]) == ("first", "sev_minor")


async def test_jira_issue_exists_on_first_sight_and_reads_the_same_every_time(standins: Standins) -> None:
    async with client(standins, "/jira") as c:
        first = (await c.get("/rest/api/3/issue/OPS-7")).json()
        second = (await c.get("/rest/api/3/issue/OPS-7")).json()
        status_only = (await c.get("/rest/api/3/issue/OPS-7", params={"fields": "status"})).json()
        missing = await c.get("/rest/api/3/issue/not-a-key")
    assert first == second
    assert first["fields"]["summary"]
    assert first["fields"]["status"]["name"] == "To Do"
    assert set(status_only["fields"]) == {"status"}
    assert missing.status_code == 404


async def test_jira_comment_properties_come_back_only_through_comment_list(standins: Standins) -> None:
    doc = {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": "x"}]}],
    }
    async with client(standins, "/jira") as c:
        for n in range(3):
            body = {"body": doc, "properties": [{"key": "ticketiq.step_key", "value": f"key-{n}"}]}
            assert (await c.post("/rest/api/3/issue/OPS-1/comment", json=body)).status_code == 201
        page1 = (await c.get("/rest/api/3/issue/OPS-1/comment", params={"maxResults": 2})).json()
        page2 = (await c.get("/rest/api/3/issue/OPS-1/comment", params={"startAt": 2, "maxResults": 2})).json()
        ids = [int(x["id"]) for x in page1["comments"] + page2["comments"]]
        expanded = await c.post("/rest/api/3/comment/list", params={"expand": "properties"}, json={"ids": ids})
        plain = (await c.post("/rest/api/3/comment/list", json={"ids": ids})).json()
    assert (page1["total"], len(page1["comments"]), len(page2["comments"])) == (3, 2, 1)
    assert all("properties" not in x for x in page1["comments"] + plain["values"])
    assert [x["properties"][0]["value"] for x in expanded.json()["values"]] == ["key-0", "key-1", "key-2"]
    assert [w["key"] for w in await standins.writes(vendor="jira")] == ["key-0", "key-1", "key-2"]


async def test_jira_transition_replay_after_the_status_moved_is_refused(standins: Standins) -> None:
    async with client(standins, "/jira") as c:
        offered = (await c.get("/rest/api/3/issue/OPS-2/transitions")).json()["transitions"]
        moved = await c.post("/rest/api/3/issue/OPS-2/transitions", json={"transition": {"id": "21"}})
        replay = await c.post("/rest/api/3/issue/OPS-2/transitions", json={"transition": {"id": "21"}})
        status = (await c.get("/rest/api/3/issue/OPS-2", params={"fields": "status"})).json()
    assert {t["name"] for t in offered} == {"In Progress", "Done"}
    assert moved.status_code == 204
    assert replay.status_code == 400
    assert "not valid" in replay.json()["errorMessages"][0]
    assert status["fields"]["status"]["name"] == "In Progress"
    assert await effects(standins, vendor="jira", target="OPS-2") == ["applied", "refused"]


async def test_teams_reply_reads_back_through_graph_with_card_content_as_a_string(standins: Standins) -> None:
    def reply(n: int) -> dict[str, Any]:
        card = {
            "type": "AdaptiveCard",
            "body": [{"type": "TextBlock", "id": "ticketiq_step_key", "text": f"k{n}"}],
        }
        return {
            "type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
        }

    conversation = THREAD.replace(":", "%3A").replace(";", "%3B").replace("@", "%40").replace("=", "%3D")
    # Each takes only the bot's own token for its scope, bought from the stand-in token endpoint.
    connector, graph_token = await bot_token(standins, CONNECTOR_SCOPE), await bot_token(standins, GRAPH_SCOPE)
    async with client(standins, "/teams", connector) as bot, client(standins, "/graph/v1.0", graph_token) as graph:
        posted = [
            await bot.post(f"/v3/conversations/{conversation}/activities/1700000000000", json=reply(n))
            for n in range(3)
        ]
        replies = "/teams/standin-team/channels/19:ops@thread.tacv2/messages/1700000000000/replies"
        first = (await graph.get(replies, params={"$top": 2})).json()
        second = (await graph.get(first["@odata.nextLink"])).json()
        too_many = await graph.get(replies, params={"$top": 51})
        wrong_team = await graph.get(replies.replace("standin-team", "other"))
    assert all(p.status_code == 201 for p in posted)
    assert [m["id"] for m in first["value"] + second["value"]] == [p.json()["id"] for p in posted]
    assert "@odata.nextLink" not in second
    content = first["value"][0]["attachments"][0]["content"]
    assert isinstance(content, str)
    assert json.loads(content)["body"][0]["text"] == "k0"
    assert (too_many.status_code, wrong_team.status_code) == (400, 404)
    assert [w["key"] for w in await standins.writes(vendor="teams", target=THREAD)] == ["k0", "k1", "k2"]


async def test_discord_nonce_dedupes_per_author_within_the_window(standins: Standins) -> None:
    def send(nonce: str, enforce: bool = True) -> dict[str, Any]:
        return {"content": "deploy done", "nonce": nonce, "enforce_nonce": enforce}

    bot_a, bot_b = {"Authorization": "Bot token-a"}, {"Authorization": "Bot token-b"}
    async with (
        client(standins, "/discord/api/v10", bot_a) as a,
        client(standins, "/discord/api/v10", bot_b) as b,
    ):
        first = (await a.post("/channels/42/messages", json=send("n1"))).json()
        again = (await a.post("/channels/42/messages", json=send("n1"))).json()
        other_author = (await b.post("/channels/42/messages", json=send("n1"))).json()
        unenforced = (await a.post("/channels/42/messages", json=send("n1", enforce=False))).json()
        too_long = await a.post("/channels/42/messages", json=send("x" * 26))
        await standins.options(discord_nonce_window_s=0.3)
        short = (await a.post("/channels/42/messages", json=send("n2"))).json()
        await asyncio.sleep(0.5)
        after_window = (await a.post("/channels/42/messages", json=send("n2"))).json()
        listed = (await a.get("/channels/42/messages")).json()
    assert again["id"] == first["id"]
    assert len({first["id"], other_author["id"], unenforced["id"], short["id"], after_window["id"]}) == 5
    assert too_long.status_code == 400
    assert too_long.json()["code"] == 50035
    assert "nonce" in too_long.json()["errors"]
    assert len(listed) == 5
    assert await effects(standins, vendor="discord", key="n1") == ["applied", "deduped", "applied", "applied"]


async def test_sqs_duplicate_succeeds_without_enqueueing_within_the_window(standins: Standins) -> None:
    async with client(standins, "/sqs", SQS) as c:
        first = (await c.post("", json=sqs_send("d1"))).json()
        again = (await c.post("", json=sqs_send("d1", body="changed"))).json()
        await standins.options(sqs_duplicate_returns_original=False)
        fresh_id = (await c.post("", json=sqs_send("d1"))).json()
        await standins.options(sqs_dedupe_window_s=0.3)
        await c.post("", json=sqs_send("d2"))
        await asyncio.sleep(0.5)
        await c.post("", json=sqs_send("d2"))
        too_long = await c.post("", json=sqs_send("x" * 129))
        wrong_action = await c.post("", json=sqs_send("d3"), headers={"X-Amz-Target": "AmazonSQS.ListQueues"})
    assert again["MessageId"] == first["MessageId"]
    assert again["SequenceNumber"] == first["SequenceNumber"]
    assert fresh_id["MessageId"] != first["MessageId"]
    assert too_long.status_code == 400
    assert too_long.json()["__type"].endswith("InvalidParameterValue")
    assert wrong_action.status_code == 400
    assert await effects(standins, vendor="sqs", key="d1") == ["applied", "deduped", "deduped"]
    assert await effects(standins, vendor="sqs", key="d2") == ["applied", "applied"]


async def test_concurrent_sends_with_one_dedup_id_enqueue_exactly_once(standins: Standins) -> None:
    async with client(standins, "/sqs", SQS) as c:
        answers = await asyncio.gather(*(c.post("", json=sqs_send("same")) for _ in range(10)))
    assert len({a.json()["MessageId"] for a in answers}) == 1
    assert sorted(await effects(standins, vendor="sqs")) == ["applied"] + ["deduped"] * 9


async def test_webhook_dedupes_on_idempotency_key_only_when_a_window_is_set(standins: Standins) -> None:
    async with client(standins, "/webhook", {"Idempotency-Key": "w1"}) as c:
        plain = [(await c.post("/hooks/ops", json={"a": 1})).json() for _ in range(2)]
        await standins.options(webhook_dedupe_window_s=60)
        keyed = [(await c.post("/hooks/keyed", json={"a": 1})).json() for _ in range(2)]
        different = await c.post("/hooks/keyed", json={"a": 2})
    assert plain[0]["id"] != plain[1]["id"]
    assert keyed[0]["id"] == keyed[1]["id"]
    assert different.status_code == 422
    assert await effects(standins, vendor="webhook", target="hooks/ops") == ["applied", "applied"]
    assert await effects(standins, vendor="webhook", target="hooks/keyed") == [
        "applied",
        "deduped",
        "refused",
    ]


async def test_faults_answer_in_the_vendors_shape_then_run_out(standins: Standins) -> None:
    await standins.fault("discord", "429", count=2, retry_after_s=0.25)
    await standins.fault("jira", "500_after_apply", operation="add_comment")
    await standins.fault("webhook", "stall", stall_s=0.3)
    doc = {"type": "doc", "version": 1, "content": []}
    async with (
        client(standins, "/discord/api/v10", {"Authorization": "Bot t"}) as d,
        client(standins, "") as c,
    ):
        limited = [await d.post("/channels/1/messages", json={"content": "hi"}) for _ in range(3)]
        comment = await c.post("/jira/rest/api/3/issue/OPS-3/comment", json={"body": doc})
        comments = (await c.get("/jira/rest/api/3/issue/OPS-3/comment")).json()
        started = time.monotonic()
        stalled = await c.post("/webhook/slow", json={})
        stalled_for = time.monotonic() - started
    assert [r.status_code for r in limited] == [429, 429, 200]
    assert limited[0].headers["retry-after"] == "0.25"
    assert limited[0].json() == {
        "message": "You are being rate limited.",
        "retry_after": 0.25,
        "global": False,
    }
    assert comment.status_code == 500
    assert comments["total"] == 1
    assert (stalled.status_code, stalled_for >= 0.3) == (200, True)
    assert await effects(standins, vendor="discord") == ["refused", "refused", "applied"]
    assert await effects(standins, vendor="jira") == ["applied"]
    assert (await standins.admin.get("/_standin/faults")).json() == []


async def test_cleared_faults_no_longer_apply(standins: Standins) -> None:
    await standins.fault("sqs", "500", count=5)
    await standins.clear_faults()
    async with client(standins, "/sqs", SQS) as c:
        assert (await c.post("", json=sqs_send("d1"))).status_code == 200


async def test_state_survives_a_restart_of_the_standins(db_url: str) -> None:
    doc = {"type": "doc", "version": 1, "content": []}
    async with serve_standins(db_url) as first, client(first, "/jira") as c:
        await c.post("/rest/api/3/issue/OPS-9/comment", json={"body": doc})
        await c.post("/rest/api/3/issue/OPS-9/transitions", json={"transition": {"id": "31"}})
    async with serve_standins(db_url) as second, client(second, "/jira") as c:
        comments = (await c.get("/rest/api/3/issue/OPS-9/comment")).json()
        issue = (await c.get("/rest/api/3/issue/OPS-9")).json()
        writes = await second.writes(vendor="jira")
    assert comments["total"] == 1
    assert issue["fields"]["status"]["name"] == "Done"
    assert len(writes) == 2


async def test_server_prints_its_settings_first_then_serves_until_sigterm(db_url: str) -> None:
    env = {**os.environ, "TICKETIQ_DATABASE_URL": db_url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ticketiq.standins.server",
        "--port",
        "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip() for _ in range(15)]
        printed = dict(line.split("=", 1) for line in lines)
        base = printed["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")
        async with httpx.AsyncClient(verify=TLS, timeout=30) as c:
            health = await c.get(f"{base}/_standin/health")
            models = await c.get(printed["TICKETIQ_MODEL_BASE_URL"] + "/models")
        proc.send_signal(signal.SIGTERM)
        # communicate() reads both pipes to their end, so their transports close before the test ends.
        rest, said = await asyncio.wait_for(proc.communicate(), 30)
        code = proc.returncode
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
    assert list(printed) == [
        "TICKETIQ_MODEL_BASE_URL",
        "TICKETIQ_INCIDENTIO_URL",
        "TICKETIQ_JIRA_URL",
        "TICKETIQ_TEAMS_SERVICE_URL",
        "TICKETIQ_GRAPH_URL",
        "TICKETIQ_DISCORD_URL",
        "TICKETIQ_SQS_URL",
        "TICKETIQ_REMOTE_AGENT_URL",
        "TICKETIQ_TEAMS_JWKS_URL",
        "TICKETIQ_TEAMS_APP_ID",
        "TICKETIQ_TEAMS_APP_PASSWORD",
        "TICKETIQ_TEAMS_TOKEN_URL",
        "TICKETIQ_GRAPH_TOKEN_URL",
        "TICKETIQ_STANDIN_MCP_URL",
        "TICKETIQ_WEBHOOK_URL",
    ]
    assert printed["TICKETIQ_JIRA_URL"] == f"{base}/jira"
    assert printed["TICKETIQ_STANDIN_MCP_URL"] == f"{base}/mcp"
    # Not the database's URL: its password would be kept wherever this output goes (a cluster's logs).
    secret = password_of(db_url)
    assert secret is not None and secret.encode() not in rest + said and secret not in "".join(lines)
    assert (health.status_code, models.status_code) == (200, 200)
    assert code == 0
