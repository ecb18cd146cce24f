"""The Teams adapters' own tokens against the stand-in token endpoint, Bot Connector and Graph over real
sockets (tools/app_tokens.py): bought by the client-credentials grant, shared, bought again before they
run out or once refused, and every failure to get one a reply not sent, never one in doubt."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.http import TLS
from tests.support.standins import Standins, serve_standins
from ticketiq.settings import Settings
from ticketiq.standins.app import StandinOptions
from ticketiq.standins.vendors.botframework import CONNECTOR_SCOPE, GRAPH_SCOPE
from ticketiq.tools.base import CallContext, Outcome, ReadBack
from ticketiq.tools.registry import build_registry

THREAD = "19:ops@thread.tacv2;messageid=1700000000000"
ARGS = {"conversation_id": THREAD, "activity_id": "1700000000000", "team_id": "standin-team"}


class Teams:
    """`teams_reply` and its reader as the engine calls them, through one HTTP client (one token cache)."""

    def __init__(self, standins: Standins, http: httpx.AsyncClient, **overrides: Any) -> None:
        self.settings: Settings = standins.settings(http_timeout_s=5.0, **overrides)
        tool = build_registry(self.settings).get("teams_reply")
        assert tool is not None and tool.reader is not None
        self.tool, self.http = tool, http

    def ctx(self, key: str, text: str) -> CallContext:
        return CallContext("run-1", "teams_reply", {**ARGS, "text": text}, key, self.http, self.settings)

    async def reply(self, key: str, text: str = "Triaged OPS-1") -> Outcome:
        return await self.tool.executor(self.ctx(key, text))

    async def read(self, key: str) -> ReadBack:
        assert self.tool.reader is not None
        return await self.tool.reader(self.ctx(key, "Triaged OPS-1"))


async def grants(standins: Standins, scope: str) -> list[dict[str, Any]]:
    return [g for g in await standins.token_grants() if g["scope"] == scope]


async def effects(standins: Standins) -> list[tuple[str, int]]:
    return [(w["effect"], w["status"]) for w in await standins.writes(vendor="teams")]


async def test_concurrent_replies_share_one_token_bought_once(standins: Standins) -> None:
    async with httpx.AsyncClient(verify=TLS) as http:
        teams = Teams(standins, http)
        outcomes = await asyncio.gather(*(teams.reply(f"tqshare{n}") for n in range(20)))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    assert [g["status"] for g in await grants(standins, CONNECTOR_SCOPE)] == [200]
    assert await effects(standins) == [("applied", 201)] * 20


async def test_a_token_is_bought_again_before_it_runs_out(db_url: str) -> None:
    # Tokens last 6 s: one is used for half its life at most, so after 3 s the next reply buys a fresh
    # one first, and the connector never sees a token about to run out.
    async with serve_standins(db_url, options=StandinOptions(oauth_token_lifetime_s=6)) as standins:
        async with httpx.AsyncClient(verify=TLS) as http:
            teams = Teams(standins, http)
            assert (await teams.reply("tqearly1")).ok
            assert (await teams.reply("tqearly2")).ok  # the same token, still fresh
            assert len(await grants(standins, CONNECTOR_SCOPE)) == 1
            await asyncio.sleep(3.05)
            assert (await teams.reply("tqearly3")).ok
        assert [g["status"] for g in await grants(standins, CONNECTOR_SCOPE)] == [200, 200]
        assert await effects(standins) == [("applied", 201)] * 3  # no 401 on the way


async def test_a_read_back_whose_graph_token_expired_buys_a_fresh_one_and_finds_the_reply(
    standins: Standins,
) -> None:
    async with httpx.AsyncClient(verify=TLS) as http:
        teams = Teams(standins, http)
        assert (await teams.reply("tqread")).ok
        assert (await teams.read("tqread")).found is True
        assert await standins.expire_tokens() == 2  # the connector's token and Graph's
        found = await teams.read("tqread")
        never = await teams.read("tqnever")
    assert (found.found, never.found) == (True, False)
    assert [g["status"] for g in await grants(standins, GRAPH_SCOPE)] == [200, 200]
    assert len(await grants(standins, CONNECTOR_SCOPE)) == 1


async def test_a_second_401_fails_the_reply_with_the_reason_and_it_is_not_in_doubt(standins: Standins) -> None:
    # The app buys its connector tokens for the wrong scope: the connector refuses each one.
    async with httpx.AsyncClient(verify=TLS) as http:
        outcome = await Teams(standins, http, teams_token_scope=GRAPH_SCOPE).reply("tqtwice")
    assert (outcome.ok, outcome.uncertain) == (False, False)
    assert "teams refused the request (401)" in (outcome.error or "")
    assert "refused again with a freshly bought token" in (outcome.error or "")
    assert "TICKETIQ_TEAMS_APP_ID" in (outcome.error or "")
    assert await effects(standins) == [("refused", 401), ("refused", 401)]
    assert [g["status"] for g in await grants(standins, GRAPH_SCOPE)] == [200, 200]


async def test_a_wrong_password_fails_every_waiting_reply_on_one_token_request(standins: Standins) -> None:
    async with httpx.AsyncClient(verify=TLS) as http:
        teams = Teams(standins, http, teams_app_password="not-the-bots-password")
        outcomes = await asyncio.gather(*(teams.reply(f"tqwrong{n}") for n in range(5)))
    for outcome in outcomes:
        assert (outcome.ok, outcome.uncertain) == (False, False)
        assert "401 invalid_client: AADSTS7000215" in (outcome.error or "")
        assert "check TICKETIQ_TEAMS_APP_PASSWORD" in (outcome.error or "")
        assert "not-the-bots-password" not in (outcome.error or "")
    assert [(g["status"], g["error"]) for g in await standins.token_grants()] == [(401, "invalid_client")]
    assert await effects(standins) == []


async def test_an_unreachable_token_endpoint_or_no_password_sends_nothing(standins: Standins) -> None:
    async with httpx.AsyncClient(verify=TLS) as http:
        unreachable = Teams(standins, http, teams_token_url="http://127.0.0.1:9/token", vendor_max_retries=1)
        no_password = Teams(standins, http, teams_app_password=None)
        cut_off = await unreachable.reply("tqcut")
        unset = await no_password.reply("tqunset")
        unread = await no_password.read("tqunset")
    assert (cut_off.ok, cut_off.uncertain, unset.ok, unset.uncertain) == (False, False, False, False)
    assert "TICKETIQ_TEAMS_TOKEN_URL" in (cut_off.error or "") and "could not be reached" in (cut_off.error or "")
    assert "TICKETIQ_TEAMS_APP_PASSWORD is unset" in (unset.error or "")
    assert unread.found is None  # without a token, Graph cannot tell
    assert await standins.token_grants() == []
    assert await effects(standins) == []
