"""The tool adapters against the vendor stand-ins over real sockets: each write lands once, each reader
finds its write by key (and says so when a key was never sent), and failures come out as the engine
needs them: retried where safe, `uncertain` where a resend could repeat a write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from tests.support.http import TLS
from tests.support.standins import Standins
from ticketiq.errors import LeaseLost
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Registry, ToolClass
from ticketiq.tools.registry import build_registry
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport

THREAD = "19:ops@thread.tacv2;messageid=1700000000000"
TEAMS_ARGS = {"conversation_id": THREAD, "activity_id": "1700000000000", "team_id": "standin-team"}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # The client an app process gives the adapters (process.py).
    async with VendorClient(VendorTransport(100), verify=TLS) as client:
        yield client


class Tools:
    """The registry built from the stand-ins' settings, and calls made the way the engine makes them."""

    def __init__(self, standins: Standins, http: httpx.AsyncClient, **overrides: Any) -> None:
        self.settings: Settings = standins.settings(**overrides)
        self.registry: Registry = build_registry(self.settings)
        self.http = http

    def ctx(
        self, tool: str, args: dict[str, Any], key: str, before_send: Callable[[], None] | None = None
    ) -> CallContext:
        return CallContext("run-1", tool, args, key, self.http, self.settings, before_send or (lambda: None))

    async def call(self, tool: str, key: str, **args: Any) -> Outcome:
        found = self.registry.get(tool)
        assert found is not None
        return await found.executor(self.ctx(tool, args, key))

    async def read(self, tool: str, key: str, **args: Any) -> ReadBack:
        found = self.registry.get(tool)
        assert found is not None
        assert found.reader is not None
        return await found.reader(self.ctx(tool, args, key))


@pytest.fixture
def tools(standins: Standins, http: httpx.AsyncClient) -> Tools:
    return Tools(standins, http, http_timeout_s=2.0)


async def effects(standins: Standins, **filters: str) -> list[str]:
    return [w["effect"] for w in await standins.writes(**filters)]


def test_registry_holds_every_vendor_tool_with_its_class(standins: Standins) -> None:
    classes = {
        name: (t.tool_class, t.reader is not None) for name, t in build_registry(standins.settings()).tools.items()
    }
    assert classes == {
        "jira_get_issue": (ToolClass.READ, False),
        "jira_list_transitions": (ToolClass.READ, False),
        "jira_add_comment": (ToolClass.WRITE, True),
        "jira_transition": (ToolClass.WRITE, True),
        "incidentio_create_incident": (ToolClass.KEYED_WRITE, True),
        "incidentio_edit_incident": (ToolClass.WRITE, True),
        "incidentio_list_incidents": (ToolClass.READ, False),
        "teams_reply": (ToolClass.WRITE, True),
        "discord_send_message": (ToolClass.WRITE, False),
        "sqs_send_message": (ToolClass.WRITE, False),
        "webhook_post": (ToolClass.WRITE, False),
        "ask_remote_agent": (ToolClass.REMOTE_AGENT, True),
        "tasks_get": (ToolClass.READ, False),  # the example tool package's (examples/ticketiq-tasks)
        "tasks_create": (ToolClass.WRITE, True),
    }
    keyed = build_registry(standins.settings(webhook_dedupe_window_s=86400.0)).tools["webhook_post"]
    assert (keyed.tool_class, keyed.dedupe_window_s) == (ToolClass.KEYED_WRITE, 86400.0)


async def test_jira_comment_is_found_by_its_key_past_the_first_page(tools: Tools, standins: Standins) -> None:
    assert (await tools.call("jira_add_comment", "tqfirst", issue_key="OPS-1", body="first\nsecond line")).ok
    await asyncio.gather(
        *(tools.call("jira_add_comment", f"tqother{n}", issue_key="OPS-1", body="x") for n in range(104))
    )
    found = await tools.read("jira_add_comment", "tqfirst", issue_key="OPS-1", body="first\nsecond line")
    never = await tools.read("jira_add_comment", "tqneversent", issue_key="OPS-1", body="x")
    assert found.found is True
    assert found.outcome is not None
    first = (await standins.writes(key="tqfirst"))[0]
    assert found.outcome.result == {"issue_key": "OPS-1", "comment_id": first["ref"]}
    assert never.found is False


async def test_jira_issue_read_and_transition_read_back(tools: Tools, standins: Standins) -> None:
    issue = await tools.call("jira_get_issue", "tqr", issue_key="OPS-5")
    offered = await tools.call("jira_list_transitions", "tqr", issue_key="OPS-5")
    moved = await tools.call("jira_transition", "tqmove", issue_key="OPS-5", transition="in progress")
    landed = await tools.read("jira_transition", "tqmove", issue_key="OPS-5", transition="In Progress")
    not_sent = await tools.read("jira_transition", "tqdone", issue_key="OPS-5", transition="Done")
    replay = await tools.call("jira_transition", "tqmove", issue_key="OPS-5", transition="In Progress")
    assert issue.ok
    assert issue.result["fields"]["summary"]
    assert {t["to"] for t in offered.result} == {"In Progress", "Done"}
    assert moved.result == {"issue_key": "OPS-5", "status": "In Progress"}
    assert (landed.found, not_sent.found) == (True, False)
    assert not replay.ok
    assert "no transition 'In Progress'" in (replay.error or "")
    assert await effects(standins, vendor="jira", operation="transition") == ["applied"]


async def test_incident_create_resent_with_its_key_is_one_incident(tools: Tools, standins: Standins) -> None:
    args = {"name": "checkout down", "summary": "500s on checkout", "severity": "Minor"}
    first = await tools.call("incidentio_create_incident", "tqinc", **args)
    again = await tools.call("incidentio_create_incident", "tqinc", **args)
    await standins.options(incidentio_repeat="error")
    answered_409 = await tools.call("incidentio_create_incident", "tqinc", **args)
    found = await tools.read("incidentio_create_incident", "tqinc", **args)
    never = await tools.read("incidentio_create_incident", "tqnever", **args)
    incident_id = first.result["incident"]["id"]
    assert again.result["incident"]["id"] == answered_409.result["incident"]["id"] == incident_id
    assert found.outcome is not None
    assert (found.found, found.outcome.result["incident"]["id"]) == (True, incident_id)
    assert never.found is False
    assert await effects(standins, vendor="incidentio", key="tqinc") == ["applied", "deduped", "deduped"]


async def test_incident_edit_reads_back_by_comparing_fields(tools: Tools) -> None:
    made = await tools.call("incidentio_create_incident", "tqinc", name="n", summary="s", severity="major")
    incident_id = made.result["incident"]["id"]
    edited = await tools.call("incidentio_edit_incident", "tqedit", incident_id=incident_id, status="Fixing")
    landed = await tools.read("incidentio_edit_incident", "tqedit", incident_id=incident_id, status="fixing")
    not_sent = await tools.read("incidentio_edit_incident", "tqx", incident_id=incident_id, status="Closed")
    listed = await tools.call("incidentio_list_incidents", "tqlist")
    missing = await tools.call("incidentio_edit_incident", "tqy", incident_id="nope", summary="z")
    assert edited.result["incident"]["severity"]["name"] == "Major"
    assert (landed.found, not_sent.found) == (True, False)
    assert [(i["id"], i["status"]) for i in listed.result["incidents"]] == [(incident_id, "Fixing")]
    assert not missing.ok
    assert not missing.uncertain
    assert "(404): Incident not found" in (missing.error or "")


async def test_teams_reply_is_found_in_graph_past_the_first_page(tools: Tools, standins: Standins) -> None:
    assert (await tools.call("teams_reply", "tqteams", text="Triaged OPS-1", **TEAMS_ARGS)).ok
    await asyncio.gather(*(tools.call("teams_reply", f"tqfill{n}", text="filler", **TEAMS_ARGS) for n in range(55)))
    found = await tools.read("teams_reply", "tqteams", text="Triaged OPS-1", **TEAMS_ARGS)
    never = await tools.read("teams_reply", "tqnever", text="x", **TEAMS_ARGS)
    no_team = await tools.read("teams_reply", "tqteams", conversation_id=THREAD, activity_id="1", text="x")
    personal = await tools.read("teams_reply", "tqteams", **{**TEAMS_ARGS, "conversation_id": "a:1personal"}, text="x")
    first = (await standins.writes(key="tqteams"))[0]
    assert found.outcome is not None
    assert (found.found, found.outcome.result) == (True, {"id": first["ref"]})
    assert (never.found, no_team.found, personal.found) == (False, None, None)


async def test_discord_resend_with_the_same_key_returns_the_original(tools: Tools, standins: Standins) -> None:
    first = await tools.call("discord_send_message", "tqdisc", channel_id="ops", content="OPS-1 triaged")
    again = await tools.call("discord_send_message", "tqdisc", channel_id="ops", content="OPS-1 triaged")
    assert first.result["message_id"] == again.result["message_id"]
    assert await effects(standins, vendor="discord", key="tqdisc") == ["applied", "deduped"]


async def test_sqs_send_carries_the_key_as_dedup_id(tools: Tools, standins: Standins) -> None:
    first = await tools.call("sqs_send_message", "tqsqs", message_body="m", message_group_id="OPS-1")
    again = await tools.call("sqs_send_message", "tqsqs", message_body="m", message_group_id="OPS-1")
    assert first.result["message_id"] == again.result["message_id"]
    assert await effects(standins, vendor="sqs", key="tqsqs") == ["applied", "deduped"]


async def test_webhook_sends_the_key_and_dedupes_only_where_the_target_does(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    plain, keyed = Tools(standins, http), Tools(standins, http, webhook_dedupe_window_s=3600.0)
    for _ in range(2):
        assert (await plain.call("webhook_post", "tqhook", path="hooks/ops", payload={"a": 1})).ok
    await standins.options(webhook_dedupe_window_s=3600)
    answers = [await keyed.call("webhook_post", "tqkeyed", path="hooks/ops", payload={"a": 1}) for _ in range(2)]
    escape = await plain.call("webhook_post", "tqbad", path="../admin", payload={})
    assert answers[0].result["response"]["id"] == answers[1].result["response"]["id"]
    assert await effects(standins, key="tqhook") == ["applied", "applied"]
    assert await effects(standins, key="tqkeyed") == ["applied", "deduped"]
    assert not escape.ok
    assert "arguments rejected" in (escape.error or "")
    assert await standins.writes(key="tqbad") == []


async def test_a_429_is_waited_out_and_retried(tools: Tools, standins: Standins) -> None:
    await standins.fault("discord", "429", retry_after_s=0.2)
    await standins.fault("jira", "429", count=2, retry_after_s=0.1, operation="add_comment")
    assert (await tools.call("discord_send_message", "tqd", channel_id="1", content="hi")).ok
    assert (await tools.call("jira_add_comment", "tqj", issue_key="OPS-1", body="hi")).ok
    assert await effects(standins, key="tqd") == ["refused", "applied"]
    assert await effects(standins, key="tqj") == ["refused", "refused", "applied"]


async def test_a_429_past_the_retry_budget_or_the_time_bound_fails_as_not_applied(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    tools = Tools(standins, http, vendor_max_retries=1, http_timeout_s=2.0)
    await standins.fault("discord", "429", count=5, retry_after_s=0.05)
    spent = await tools.call("discord_send_message", "tqa", channel_id="1", content="hi")
    await standins.clear_faults()
    await standins.fault("discord", "429", retry_after_s=60)
    too_long = await tools.call("discord_send_message", "tqb", channel_id="1", content="hi")
    assert (spent.ok, spent.uncertain, too_long.ok, too_long.uncertain) == (False, False, False, False)
    assert "rate limiting" in (too_long.error or "")
    assert await effects(standins, key="tqa") == ["refused", "refused"]
    assert await effects(standins, key="tqb") == ["refused"]


@pytest.mark.parametrize(("mode", "effect"), [("500", "refused"), ("500_after_apply", "applied")])
async def test_a_5xx_on_a_plain_write_is_uncertain_and_never_resent(
    tools: Tools, standins: Standins, mode: str, effect: str
) -> None:
    await standins.fault("jira", mode, operation="add_comment")
    outcome = await tools.call("jira_add_comment", "tq500", issue_key="OPS-1", body="hi")
    assert (outcome.ok, outcome.uncertain) == (False, True)
    assert "jira failed (500)" in (outcome.error or "")
    assert await effects(standins, key="tq500") == [effect]


async def test_a_timeout_on_a_plain_write_is_uncertain_though_the_write_landed(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    tools = Tools(standins, http, http_timeout_s=0.3)
    await standins.fault("sqs", "stall", stall_s=1.0)
    outcome = await tools.call("sqs_send_message", "tqslow", message_body="m", message_group_id="g")
    assert (outcome.ok, outcome.uncertain) == (False, True)
    for _ in range(50):  # the stalled request finishes after the client gave up on it
        if await standins.writes(key="tqslow"):
            break
        await asyncio.sleep(0.05)
    assert await effects(standins, key="tqslow") == ["applied"]


async def test_a_5xx_on_a_keyed_write_or_a_read_is_retried(tools: Tools, standins: Standins) -> None:
    await standins.fault("incidentio", "500_after_apply", operation="create_incident")
    await standins.fault("jira", "500", operation="get_issue")
    made = await tools.call("incidentio_create_incident", "tqkeyed", name="n", summary="s", severity="minor")
    read = await tools.call("jira_get_issue", "tqread", issue_key="OPS-1")
    assert (made.ok, read.ok) == (True, True)
    assert await effects(standins, key="tqkeyed") == ["applied", "deduped"]
    assert await standins.writes(vendor="incidentio", effect="applied") == await standins.writes(
        key="tqkeyed", effect="applied"
    )


async def test_before_send_raising_stops_the_send(tools: Tools, standins: Standins) -> None:
    def lapsed() -> None:
        raise LeaseLost("run-1", "deadline passed")

    tool = tools.registry.get("jira_add_comment")
    assert tool is not None
    with pytest.raises(LeaseLost):
        await tool.executor(tools.ctx("jira_add_comment", {"issue_key": "OPS-1", "body": "x"}, "tqlost", lapsed))
    assert await standins.writes() == []


async def test_errors_name_the_vendor_message_and_never_a_secret(standins: Standins, http: httpx.AsyncClient) -> None:
    tools = Tools(standins, http, incidentio_api_key="sekrit-incident-key")
    outcome = await tools.call(
        "incidentio_create_incident", "tqs", name="n", summary="s", severity="sekrit-incident-key"
    )
    bad_args = await tools.call("jira_add_comment", "tqa", issue_key="ops 1", body="x", extra=True)
    assert not outcome.ok
    assert "no severity named '***'" in (outcome.error or "")
    assert "sekrit" not in (outcome.error or "")
    assert "'issue_key' must match" in (bad_args.error or "")
    assert "'extra' is not allowed" in (bad_args.error or "")


async def test_a_write_answered_in_a_shape_the_adapter_does_not_know_is_uncertain(
    standins: Standins, http: httpx.AsyncClient
) -> None:
    # A webhook target posing as Discord: it takes the write but answers without a channel id.
    tools = Tools(standins, http, discord_url=f"{standins.base_url}/webhook/not-discord")
    outcome = await tools.call("discord_send_message", "tqshape", channel_id="1", content="hi")
    assert (outcome.ok, outcome.uncertain) == (False, True)
    assert "discord answered in an unexpected shape" in (outcome.error or "")
    assert await effects(standins, vendor="webhook") == ["applied"]
