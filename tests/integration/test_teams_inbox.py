"""The Teams inbox over a real socket: Bot Framework activities signed by the stand-in token service,
the real stand-ins (Bot Framework connector, Graph, Jira, the scripted model) and an app process in the
test's event loop (DESIGN.md I2, I9, I12, I13, I14; "Who may do what").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI

from tests.support.crash import eventually, kill_driver, lapse, reaches, status_of
from tests.support.engine import engine_under_test, read_rows
from tests.support.http import TLS, serving
from tests.support.standins import Standins, serve_standins
from ticketiq.auth import tokens
from ticketiq.entries.api import create_app
from ticketiq.intake import teams_inbox
from ticketiq.intake.teams_turns import REPLY_IDX, adopt_unstarted
from ticketiq.leader.sweep import Sweeper
from ticketiq.process import AppProcess
from ticketiq.standins.app import StandinOptions
from ticketiq.standins.faults import Fault
from ticketiq.standins.server import STANDIN_BOT_APP_ID
from ticketiq.standins.vendors.botframework import APP_PASSWORD, CONNECTOR_SCOPE, KID
from ticketiq.storage.token_store import TokenStore

TEAM = "standin-team"  # the one team the stand-in Graph holds
CONVERSATION = "19:support@thread.tacv2;messageid=1700000000900"


@dataclass
class Site:
    base: str
    client: httpx.AsyncClient
    process: AppProcess
    standins: Standins
    db_url: str

    @property
    def service_url(self) -> str:
        return f"{self.standins.base_url}/teams"

    async def token(self, name: str, role: str) -> str:
        token = tokens.mint()
        assert await TokenStore(self.process.db).create(name, role, None, tokens.token_hash(token), "test")
        return token

    async def mint(self, **fields: Any) -> str:
        """A Bot Framework token from the stand-in token service."""
        body = {"audience": STANDIN_BOT_APP_ID, "service_url": self.service_url, **fields}
        response = await self.standins.admin.post("/_standin/botframework/token", json=body)
        response.raise_for_status()
        return str(response.json()["access_token"])

    async def send(self, activity: dict[str, Any], token: str | None) -> httpx.Response:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return await self.client.post("/v1/teams/messages", json=activity, headers=headers)

    async def replies(self) -> list[dict[str, Any]]:
        return [w for w in await self.standins.writes(vendor="teams", operation="reply") if w["effect"] == "applied"]

    async def stored(self) -> tuple[int, int]:
        """Inbox rows and runs: what a refused request must leave as it was."""
        rows = await read_rows(
            self.db_url, "SELECT (SELECT count(*) FROM teams_inbox) AS inbox, (SELECT count(*) FROM runs) AS runs"
        )
        return int(rows[0]["inbox"]), int(rows[0]["runs"])


def activity(activity_id: str, text: str, service_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "id": activity_id,
        "timestamp": "2024-05-01T10:00:00.000Z",
        "serviceUrl": service_url,
        "channelId": "msteams",
        "from": {"id": "29:user-ana", "name": "Ana", "aadObjectId": "aad-ana"},
        "conversation": {"id": CONVERSATION, "conversationType": "channel"},
        "recipient": {"id": "28:bot", "name": "TicketIQ"},
        "text": text,
        "channelData": {"team": {"id": "19:team@thread.tacv2", "aadGroupId": TEAM}, "tenant": {"id": "t"}},
        **extra,
    }


@contextlib.asynccontextmanager
async def site(
    db_url: str, tmp: Path, standin_options: StandinOptions | None = None, **overrides: Any
) -> AsyncIterator[Site]:
    async with serve_standins(db_url, options=standin_options) as standins:
        settings = standins.settings(home=tmp, seal_keys="t:teams-secret", teams_agent="reader", **overrides)
        process = await AppProcess.start(settings)
        try:
            async with (
                serving(create_app(settings, process)) as base,
                httpx.AsyncClient(verify=TLS, base_url=base) as client,
            ):
                yield Site(base, client, process, standins, db_url)
        finally:
            await process.stop()


async def turn_of(s: Site, activity_id: str) -> dict[str, Any]:
    rows = await read_rows(
        s.db_url,
        "SELECT r.id::text AS run_id, r.status, r.channel, r.may_wait, r.created_by, r.answer, r.error "
        "FROM teams_inbox i JOIN runs r ON r.idempotency_key = i.run_key WHERE i.activity_id = %s",
        activity_id,
    )
    assert len(rows) == 1, rows
    return rows[0]


async def inbox(s: Site, token: str) -> list[dict[str, Any]]:
    response = await s.client.get("/v1/teams/inbox", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


async def test_a_signed_activity_is_acknowledged_at_once_and_its_turn_replies_once_with_a_card(
    db_url: str, tmp_path: Path
) -> None:
    # The connector holds the turn's reply for 3 s: an acknowledgement that waited for the turn would
    # come after it. Nothing waits for the turn (Teams redelivers an activity after 15 s).
    held = StandinOptions(faults=[Fault(vendor="teams", mode="stall", stall_s=3.0)])
    async with site(db_url, tmp_path, held) as s:
        token = await s.mint()
        response = await s.send(activity("1700000000901", "<at>TicketIQ</at> what is OPS-801?", s.service_url), token)
        assert response.status_code == 201, response.text
        shown = response.json()
        assert shown["status"] == "received" and shown["activity_id"] == "1700000000901"
        run_id = shown["run_id"]
        assert await status_of(db_url, run_id) not in ("succeeded", "failed")  # acknowledged, the turn goes on
        assert await s.replies() == []
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
        run = await turn_of(s, "1700000000901")
        assert (run["run_id"], run["channel"], run["may_wait"], run["created_by"]) == (run_id, "teams", False,
                                                                                       "teams:aad-ana")  # fmt: skip
        # The mention of the bot is not part of what the agent was asked.
        inputs = await read_rows(db_url, "SELECT input FROM runs WHERE id = %s", run_id)
        assert inputs[0]["input"] == "what is OPS-801?"
        replies = await s.replies()
        assert len(replies) == 1, replies
        reply = replies[0]
        assert reply["target"] == CONVERSATION and reply["body"]["replyToId"] == "1700000000901"
        card = reply["body"]["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert card["content"]["body"][0]["text"] == run["answer"] and "OPS-801" in run["answer"]
        link = card["content"]["actions"][0]
        assert link["type"] == "Action.OpenUrl" and link["url"] == f"{s.base}/console/runs/{run_id}"
        # The reply is a write of the run: marked, recorded, audited with the run's end.
        calls = await read_rows(db_url, "SELECT tool, status, class FROM calls WHERE run_id = %s AND idx = %s",
                                run_id, REPLY_IDX)  # fmt: skip
        assert calls == [{"tool": "teams_hand_on", "status": "done", "class": "write"}]
        ended = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", run_id
        )
        assert ended[0]["detail"]["reply"]["posted"] is True
        operator = await s.token("ops", "operator")
        [entry] = await inbox(s, operator)
        assert (entry["status"], entry["run_id"], entry["activity_id"]) == ("replied", run_id, "1700000000901")
        assert entry["from"] == {"id": "29:user-ana", "name": "Ana"} and entry["reason"] is None


async def test_a_redelivery_and_a_content_duplicate_within_the_window_start_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, teams_dedupe_s=2.0) as s:
        token = await s.mint()
        first = await s.send(activity("1700000000911", "look at OPS-811", s.service_url), token)
        assert first.status_code == 201, first.text
        run_id = first.json()["run_id"]
        again = await s.send(activity("1700000000911", "look at OPS-811", s.service_url), token)
        assert again.status_code == 200 and again.json()["status"] == "redelivered"
        assert again.json()["run_id"] == run_id
        # Teams' second retry layer: the same message under a new id.
        renamed = await s.send(activity("1700000000912", "look at OPS-811", s.service_url), token)
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["status"] == "duplicate" and renamed.json()["duplicate_of"] == "1700000000911"
        assert await s.stored() == (1, 1)
        assert await reaches(db_url, run_id, "succeeded") == "succeeded"
        # A redelivery after the turn ended still starts nothing; another message is another turn.
        assert (await s.send(activity("1700000000911", "look at OPS-811", s.service_url), token)).status_code == 200
        other = await s.send(activity("1700000000913", "and OPS-812?", s.service_url), token)
        assert other.status_code == 201
        assert await reaches(db_url, other.json()["run_id"], "succeeded") == "succeeded"
        await asyncio.sleep(2.1)  # past the window, the same words are a new message
        later = await s.send(activity("1700000000914", "look at OPS-811", s.service_url), token)
        assert later.status_code == 201 and later.json()["status"] == "received"
        assert await reaches(db_url, later.json()["run_id"], "succeeded") == "succeeded"
        assert await s.stored() == (3, 3)
        assert len(await s.replies()) == 3  # one per turn


def foreign_token(claims: dict[str, Any]) -> str:
    """A token signed by a key that is not the token service's, under the service's key id."""
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(claims, other, algorithm="RS256", headers={"kid": KID})


async def test_a_token_that_does_not_verify_or_a_malformed_activity_stores_nothing(db_url: str, tmp_path: Path) -> None:
    async with site(db_url, tmp_path) as s:
        good = activity("1700000000921", "look at OPS-821", s.service_url)
        now = int(time.time())
        claims = {"iss": "https://api.botframework.com", "aud": STANDIN_BOT_APP_ID, "serviceurl": s.service_url,
                  "nbf": now - 60, "exp": now + 3600}  # fmt: skip
        api_token = await s.token("root", "admin")
        refused: dict[str, tuple[str | None, Any, int, str]] = {
            "missing": (None, good, 401, "no bearer token"),
            "our API token": (api_token, good, 401, "not a JWT"),
            "expired": (await s.mint(expires_in=-3600), good, 401, "expired"),
            "another audience": (await s.mint(audience="another-bot"), good, 401, "audience"),
            "another issuer": (await s.mint(issuer="https://evil.example"), good, 401, "issuer"),
            "signed by another key": (foreign_token(claims), good, 401, "Signature verification failed"),
            "unsigned": (jwt.encode(claims, "", algorithm="none"), good, 401, "only RS256"),
            "a serviceUrl the token does not name": (
                await s.mint(service_url="https://smba.trafficmanager.net/amer/"),
                good,
                401,
                "serviceUrl",
            ),
            "no conversation": (
                await s.mint(),
                {k: v for k, v in good.items() if k != "conversation"},
                422,
                "conversation",
            ),
            "no sender id": (await s.mint(), {**good, "from": {"name": "x"}}, 422, "from"),
            # The key is endorsed for Skype too, so the token is good; the inbox takes Teams messages only.
            "another channel": (await s.mint(), {**good, "channelId": "skype"}, 422, "channelId"),
            "a channel the signing key is not endorsed for": (
                await s.mint(),
                {**good, "channelId": "slack"},
                401,
                "not endorsed for the channel 'slack'",
            ),
            "no text": (await s.mint(), {**good, "text": "<at>TicketIQ</at> "}, 422, "text"),
            "not an object": (await s.mint(), [good], 422, "body"),
        }
        before = await s.stored()
        for why, (token, body, status, said) in refused.items():
            response = await s.send(body, token)
            assert response.status_code == status, (why, response.status_code, response.text)
            detail = response.json()["detail"][0]
            assert said in detail["msg"] or said in ".".join(map(str, detail["loc"])), (why, detail)
            if status == 401:
                assert detail["loc"] == ["header", "Authorization"]
                assert response.headers["WWW-Authenticate"].startswith('Bearer realm="botframework"')
        assert await s.stored() == before == (0, 0)
        assert await s.replies() == []
        # Other activity types are acknowledged and ignored, once their token verified.
        update = {"type": "conversationUpdate", "id": "x1", "serviceUrl": s.service_url}
        assert (await s.send(update, None)).status_code == 401
        ignored = await s.send(update, await s.mint())
        assert ignored.status_code == 200 and ignored.json()["status"] == "ignored"
        assert await s.stored() == (0, 0)


async def test_an_unreachable_key_set_or_an_unset_app_id_is_a_503_and_stores_nothing(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path / "a", teams_jwks_url="http://127.0.0.1:9/jwks") as s:
        response = await s.send(activity("1700000000931", "OPS-831", s.service_url), await s.mint())
        assert response.status_code == 503, response.text
        assert response.json()["detail"][0]["loc"] == ["header", "Authorization"]
        assert await s.stored() == (0, 0)
    async with site(db_url, tmp_path / "b", teams_app_id="") as s:
        response = await s.send(activity("1700000000932", "OPS-832", s.service_url), await s.mint())
        assert response.status_code == 503 and "TICKETIQ_TEAMS_APP_ID" in response.text
        assert await s.stored() == (0, 0)


async def test_the_inbox_listing_needs_an_operator_token_and_says_why_a_turn_failed(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path) as s:
        caller, operator, admin = (await s.token("c", "caller"), await s.token("o", "operator"),
                                   await s.token("a", "admin"))  # fmt: skip
        assert (await s.client.get("/v1/teams/inbox")).status_code == 401
        bot = await s.mint()
        assert (await s.client.get("/v1/teams/inbox", headers={"Authorization": f"Bearer {bot}"})).status_code == 401
        forbidden = await s.client.get("/v1/teams/inbox", headers={"Authorization": f"Bearer {caller}"})
        assert forbidden.status_code == 403
        # The agent is quarantined: the turn fails at its run gate, and the row says why.
        quarantined = await s.client.put("/v1/gates/quarantines/agent/reader", json={"reason": "under review"},
                                         headers={"Authorization": f"Bearer {admin}"})  # fmt: skip
        assert quarantined.status_code == 200, quarantined.text
        sent = await s.send(activity("1700000000941", "look at OPS-841", s.service_url), bot)
        assert sent.status_code == 201
        assert await reaches(db_url, sent.json()["run_id"], "succeeded", "failed") == "failed"
        [entry] = await inbox(s, operator)
        assert entry["status"] == "failed" and "under review" in entry["reason"], entry
        assert await s.replies() == []
        paged = await s.client.get("/v1/teams/inbox", params={"limit": 1, "before": entry["id"]},
                                   headers={"Authorization": f"Bearer {operator}"})  # fmt: skip
        assert paged.json()["entries"] == []


async def test_a_row_whose_process_died_before_making_its_run_is_made_by_a_redelivery_or_the_leader(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, lead=False, queued_grace_s=0.0) as s:
        # Two rows as a process that died between storing them and making their runs leaves them.
        for activity_id, text in (("1700000000951", "look at OPS-851"), ("1700000000952", "look at OPS-852")):
            await read_rows(
                db_url,
                "INSERT INTO teams_inbox (activity_id, conversation_id, content_hash, run_key, service_url, team_id, "
                "from_id, actor, text, app_url, activity) VALUES (%s, %s, %s, %s, %s, %s, '29:user-ana', "
                "'teams:aad-ana', %s, %s, '{}')",
                activity_id, CONVERSATION, teams_inbox.content_hash(CONVERSATION, None, "29:user-ana", text),
                teams_inbox.run_key(CONVERSATION, activity_id), s.service_url, TEAM, text, s.base,
            )  # fmt: skip
        operator = await s.token("ops", "operator")
        assert [e["status"] for e in await inbox(s, operator)] == ["received", "received"]
        # Teams delivers the first again: its run is made now, once.
        again = await s.send(activity("1700000000951", "look at OPS-851", s.service_url), await s.mint())
        assert again.status_code == 200 and again.json()["status"] == "unstarted", again.text
        assert again.json()["run_id"] is not None
        # The second is never delivered again: the leader's sweep makes its run.
        await adopt_unstarted(s.process.engine)
        await eventually(lambda: _all_replied(s, operator, 2), timeout_s=60, what="both turns replying")
        assert await s.stored() == (2, 2)
        assert len(await s.replies()) == 2


async def _all_replied(s: Site, operator: str, n: int) -> bool:
    entries = await inbox(s, operator)
    return len(entries) == n and all(e["status"] == "replied" for e in entries)


async def test_a_reply_in_flight_when_its_process_died_is_read_back_and_not_posted_twice(
    db_url: str, tmp_path: Path
) -> None:
    async with site(db_url, tmp_path, lead=False, write_budget_s=4.0) as s:
        # The connector holds the reply 2 s before it applies it; the process dies 0.2 s into that.
        await s.standins.fault("teams", "stall", stall_s=2.0, operation="reply")
        sent = await s.send(activity("1700000000961", "look at OPS-861", s.service_url), await s.mint())
        run_id = sent.json()["run_id"]

        async def in_doubt() -> bool:
            rows = await read_rows(db_url, "SELECT 1 FROM calls WHERE run_id = %s AND idx = %s AND status = "
                                   "'in_doubt'", run_id, REPLY_IDX)  # fmt: skip
            return bool(rows)

        await eventually(in_doubt, what="the reply in doubt")
        marked = time.monotonic()
        await asyncio.sleep(0.2)
        await kill_driver(s.process.engine, run_id)
        assert (await read_rows(db_url, "SELECT status FROM runs WHERE id = %s", run_id))[0]["status"] == "answered"
        await lapse(db_url, run_id)
        assert await Sweeper(s.process.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(s.process.engine.tasks[run_id], 60) == "succeeded"
        assert time.monotonic() - marked >= 2.0  # read back only once it could no longer be in flight (I14)
        await asyncio.sleep(max(0.0, marked + 2.5 - time.monotonic()))
        replies = await s.replies()
        assert len(replies) == 1, replies
        ended = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", run_id
        )
        reply = ended[0]["detail"]["reply"]
        assert reply["posted"] is True and reply["happened"] == "found", reply
        # Nothing of the turn was asked or made again: the kept answer was handed on (I12).
        resumed = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
        )
        assert resumed[0]["detail"]["handing_on"] is True


@pytest.mark.parametrize(("mode", "happened"), [("500", "sent_once"), ("500_after_apply", "found")])
async def test_a_reply_whose_outcome_the_connector_left_open_is_read_back_and_posted_once(
    db_url: str, tmp_path: Path, mode: str, happened: str
) -> None:
    # The connector answers the reply 500: before applying it ("500") or after ("500_after_apply", the
    # purest open outcome). The turn does not end without its reply, nor post it twice: the reply is
    # read back once it can no longer be in flight (I14) and sent again only if it is not there.
    async with site(db_url, tmp_path, write_budget_s=1.0) as s:
        await s.standins.fault("teams", mode, operation="reply")
        sent = await s.send(activity("1700000000971", "look at OPS-871", s.service_url), await s.mint())
        run_id = sent.json()["run_id"]
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
        replies = await s.replies()
        assert len(replies) == 1, replies
        ended = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", run_id
        )
        reply = ended[0]["detail"]["reply"]
        assert reply["posted"] is True and reply["happened"] == happened, reply
        operator = await s.token("ops", "operator")
        [entry] = await inbox(s, operator)
        assert entry["status"] == "replied", entry


async def test_a_model_asking_for_the_engines_own_reply_is_refused_and_nothing_is_sent(
    db_url: str, tmp_path: Path
) -> None:
    received: list[str] = []
    catch_all = FastAPI()

    @catch_all.post("/{path:path}")
    async def anything(path: str) -> dict[str, str]:
        received.append(path)
        return {"id": "1"}

    async with serving(catch_all) as elsewhere:
        asked = {
            "service_url": elsewhere, "conversation_id": CONVERSATION, "activity_id": "1", "text": "hi",
            "run_url": "x",
        }  # fmt: skip
        scripts: dict[str, list[dict[str, Any]]] = {
            "a": [{"calls": [{"tool": "teams_hand_on", "arguments": asked}]}, {"text": "done"}]
        }
        async with engine_under_test(db_url, tmp_path, scripts, {"a": {"tools": ["probe_read"]}}) as h:
            run = await h.finish(await h.run("a"))
        assert run["status"] == "succeeded"
        calls = await read_rows(db_url, "SELECT tool, gate, outcome FROM calls WHERE run_id = %s", run["id"])
        assert [(c["tool"], c["gate"]) for c in calls] == [("teams_hand_on", "refuse")]
        assert "made by the engine" in str(calls[0]["outcome"])
    assert received == []


async def test_a_token_signed_by_a_key_not_endorsed_for_the_activitys_channel_is_refused_and_stores_nothing(
    db_url: str, tmp_path: Path
) -> None:
    # The token service's key signs for Skype and Web Chat only: a token it signed for a Teams activity
    # is refused, as the Bot Framework SDKs refuse it.
    not_teams = StandinOptions(botframework_endorsements=["skype", "webchat"])
    async with site(db_url, tmp_path / "a", standin_options=not_teams) as s:
        response = await s.send(activity("1700000000991", "look at OPS-891", s.service_url), await s.mint())
        assert response.status_code == 401, response.text
        detail = response.json()["detail"][0]
        assert detail["loc"] == ["header", "Authorization"]
        assert "not endorsed for the channel 'msteams'" in detail["msg"], detail
        assert await s.stored() == (0, 0)
        assert await s.replies() == []
    # As the SDKs do, a key that lists no endorsements at all is not checked.
    bare = StandinOptions(botframework_endorsements=None)
    async with site(db_url, tmp_path / "b", standin_options=bare) as s:
        response = await s.send(activity("1700000000992", "look at OPS-892", s.service_url), await s.mint())
        assert response.status_code == 201, response.text
        assert await reaches(db_url, response.json()["run_id"], "succeeded") == "succeeded"
        assert await s.stored() == (1, 1)


async def connector_grants(s: Site) -> list[dict[str, Any]]:
    return [g for g in await s.standins.token_grants() if g["scope"] == CONNECTOR_SCOPE]


async def test_a_reply_whose_token_expired_mid_test_is_posted_once_with_a_fresh_token(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the HTTP clients' too
    async with site(db_url, tmp_path) as s:
        bot = await s.mint()
        first = await s.send(activity("1700000000981", "look at OPS-881", s.service_url), bot)
        assert await reaches(db_url, first.json()["run_id"], "succeeded") == "succeeded"
        assert [g["status"] for g in await connector_grants(s)] == [200]
        # An hour passes: the token the app holds runs out, though the app still thinks it good.
        assert await s.standins.expire_tokens() == 1
        second = await s.send(activity("1700000000982", "look at OPS-882", s.service_url), bot)
        run_id = second.json()["run_id"]
        assert await reaches(db_url, run_id, "succeeded") == "succeeded"
        # Each turn's reply is applied once; the connector refused the expired token once (applying
        # nothing), and the app bought a fresh one and sent the reply once more.
        assert [r["body"]["replyToId"] for r in await s.replies()] == ["1700000000981", "1700000000982"]
        refused = await s.standins.writes(vendor="teams", operation="reply", effect="refused")
        assert [(w["status"], w["body"]["replyToId"]) for w in refused] == [(401, "1700000000982")]
        grants = await connector_grants(s)
        assert [g["status"] for g in grants] == [200, 200]
        ended = await read_rows(
            db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", run_id
        )
        assert ended[0]["detail"]["reply"]["posted"] is True
        operator = await s.token("ops", "operator")
        assert [e["status"] for e in await inbox(s, operator)] == ["replied", "replied"]
    logged = caplog.text
    assert "refused the bot's token (401)" in logged  # the logs were captured, and say what happened
    for granted in grants:
        assert granted["access_token"] not in logged
    assert APP_PASSWORD not in logged


async def test_a_wrong_app_password_fails_the_turns_reply_with_a_reason_naming_the_setting(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with site(db_url, tmp_path, teams_app_password="not-the-bots-password") as s:
        sent = await s.send(activity("1700000000985", "look at OPS-885", s.service_url), await s.mint())
        run_id = sent.json()["run_id"]
        assert await reaches(db_url, run_id, "succeeded", "failed") == "succeeded"
        operator = await s.token("ops", "operator")
        [entry] = await inbox(s, operator)
        assert entry["status"] == "failed", entry
        assert "TICKETIQ_TEAMS_APP_PASSWORD" in entry["reason"] and "invalid_client" in entry["reason"], entry
        # Nothing reached the connector, so the reply is not in doubt: it was not sent.
        assert await s.standins.writes(vendor="teams") == []
        calls = await read_rows(db_url, "SELECT status, outcome FROM calls WHERE run_id = %s AND idx = %s",
                                run_id, REPLY_IDX)  # fmt: skip
        assert calls[0]["status"] == "done" and calls[0]["outcome"]["result"].get("outcome") is None, calls
        assert [(g["status"], g["error"]) for g in await connector_grants(s)] == [(401, "invalid_client")]
    assert "not-the-bots-password" not in caplog.text and "not-the-bots-password" not in str(entry)
