"""The agents file's `mcp_servers:` section and the class each MCP tool gets: pure, no server."""

from __future__ import annotations

import os

import pytest
from mcp import types

from ticketiq.errors import ConfigError
from ticketiq.runtime.user_agent import user_agent
from ticketiq.tools.base import Outcome
from ticketiq.tools.mcp_link import McpLink
from ticketiq.tools.mcp_tools import masked, offered_schema, outcome_of
from ticketiq.values.mcp_servers import Hints, ToolRule, from_agents_file, offered_name, parse, tool_class

ENV = {"NOTES_TOKEN": "s3cret-token-value"}


def test_a_server_is_read_with_its_variables_put_in() -> None:
    (spec,) = parse(
        {
            "notes": {
                "url": "http://127.0.0.1:9100/mcp",
                "headers": {"Authorization": "Bearer ${NOTES_TOKEN}"},
                "trust_annotations": True,
                "tools": {"add_note": {"class": "keyed_write", "key_argument": "request_id"}},
            }
        },
        "agents.yaml",
        ENV,
    )
    assert spec.name == "notes" and spec.transport == "streamable-http" and spec.trust_annotations
    assert spec.headers == {"Authorization": "Bearer s3cret-token-value"}
    assert spec.tools["add_note"] == ToolRule("keyed_write", "request_id", None)
    assert spec.secrets() == ["s3cret-token-value"]  # what the environment gave, not the header's text
    (stdio,) = parse({"local": {"command": ["python", "-m", "notes"], "env": {"T": "${NOTES_TOKEN}"}}}, "a", ENV)
    assert stdio.transport == "stdio" and stdio.command == ("python", "-m", "notes") and not stdio.trust_annotations


@pytest.mark.parametrize(
    ("section", "says"),
    [
        ({"notes": {"url": "http://x/mcp", "headers": {"A": "${MISSING}"}}}, "names ${MISSING}, which is not set"),
        ({"notes": {}}, "exactly one of `url`"),
        ({"notes": {"url": "http://x/mcp", "command": ["x"]}}, "exactly one of `url`"),
        ({"notes": {"url": "ftp://x"}}, "`url` must be an http"),
        ({"notes": {"command": "python -m notes"}}, "`command` must be a list"),
        ({"no_tes": {"url": "http://x/mcp"}}, "a server's name"),
        ({"notes": {"url": "http://x/mcp", "trust_annotations": "yes"}}, "true or false"),
        ({"notes": {"url": "http://x/mcp", "oops": 1}}, "unknown fields ['oops']"),
        ({"notes": {"url": "http://x/mcp", "tools": {"t": {"class": "delegation"}}}}, "class must be one of"),
        ({"notes": {"url": "http://x/mcp", "tools": {"t": {"class": "keyed_write"}}}}, "needs `key_argument`"),
        ({"notes": {"url": "http://x/mcp", "tools": {"t": {"class": "write", "key_argument": "k"}}}}, "only a keyed"),
        ({"notes": {"command": ["x"], "headers": {"A": "b"}}}, "`headers` are for a server reached by `url`"),
        ([], "must be a mapping"),
    ],
)
def test_each_mistake_says_where_and_what_to_do(section: object, says: str) -> None:
    with pytest.raises(ConfigError, match=r"agents\.yaml: ") as raised:
        parse(section, "agents.yaml", ENV)
    assert says in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_a_tool_named_server_dot_tool_is_offered_with_no_dot() -> None:
    assert from_agents_file("notes.add_note") == offered_name("notes", "add_note") == "notes__add_note"
    assert from_agents_file("jira_get_issue") == "jira_get_issue"
    assert from_agents_file(".x") == ".x"


def test_the_class_of_a_tool_from_its_hints_only_when_the_server_is_trusted() -> None:
    read, idem = Hints(read_only=True), Hints(read_only=False, idempotent=True, destructive=False)
    assert tool_class(read, trusted=True, rule=None) == "read"
    assert tool_class(idem, trusted=True, rule=None) == "idempotent_write"
    # MCP's default destructiveHint is true: an idempotent tool that does not say otherwise stays a write.
    assert tool_class(Hints(idempotent=True), trusted=True, rule=None) == "write"
    assert tool_class(Hints(idempotent=True, destructive=True), trusted=True, rule=None) == "write"
    assert tool_class(Hints(), trusted=True, rule=None) == "write"
    # An untrusted server's hints count for nothing: every tool a write.
    assert tool_class(read, trusted=False, rule=None) == "write"
    assert tool_class(idem, trusted=False, rule=None) == "write"
    # The operator's rule over everything.
    assert tool_class(read, trusted=True, rule=ToolRule("write")) == "write"
    assert tool_class(Hints(), trusted=False, rule=ToolRule("read")) == "read"
    assert tool_class(Hints(), trusted=False, rule=ToolRule("keyed_write", "request_id")) == "keyed_write"


def test_a_keyed_writes_key_argument_is_not_offered_to_the_model() -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string"}, "request_id": {"type": "string"}},
              "required": ["text", "request_id"]}  # fmt: skip
    offered = offered_schema(schema, ToolRule("keyed_write", "request_id"))
    assert offered["properties"] == {"text": {"type": "string"}} and offered["required"] == ["text"]
    assert offered_schema(schema, None) == schema


def test_what_the_model_is_told_of_an_answer() -> None:
    text = types.TextContent(type="text", text='{"id": 7}')
    assert outcome_of(types.CallToolResult(content=[text])) == Outcome(ok=True, result={"id": 7})
    plain = types.TextContent(type="text", text="done")
    assert outcome_of(types.CallToolResult(content=[plain])).result == "done"
    structured = types.CallToolResult(content=[text], structured_content={"id": 8})
    assert outcome_of(structured).result == {"id": 8}
    failed = outcome_of(
        types.CallToolResult(content=[types.TextContent(type="text", text="no note n1")], is_error=True)
    )
    assert failed == Outcome(ok=False, error="no note n1")  # the tool answered: not an open question


def test_a_secret_a_server_echoes_is_masked() -> None:
    said = Outcome(ok=True, result={"echo": ["Bearer s3cret-token-value"]}, error=None)
    assert masked(said, ["s3cret-token-value"]).result == {"echo": ["Bearer ***"]}


def test_a_variable_may_have_a_default_and_the_url_may_name_one() -> None:
    (spec,) = parse({"notes": {"url": "${NOTES_URL:-http://127.0.0.1:9000/mcp}"}}, "a", {})
    assert spec.url == "http://127.0.0.1:9000/mcp"
    (spec,) = parse({"notes": {"url": "${NOTES_URL:-http://127.0.0.1:9000/mcp}"}}, "a", {"NOTES_URL": "http://h/mcp"})
    assert spec.url == "http://h/mcp"
    (spec,) = parse({"notes": {"url": "http://h/mcp", "headers": {"A": "x${EMPTY:-}y"}}}, "a", {})
    assert spec.headers == {"A": "xy"}


def test_an_agent_names_a_servers_tool_with_a_dot_and_only_of_a_declared_server() -> None:
    from ticketiq.agents.catalog import parse as parse_agents

    agent = {"system_prompt": "p", "owner": "o", "tools": ["notes.add_note", "jira_get_issue"]}
    declared = {"notes": {"url": "http://127.0.0.1:9/mcp"}}
    catalog = parse_agents({"agents": {"noter": agent}, "mcp_servers": declared}, "a.yaml", {"jira_get_issue"})
    assert catalog.agents["noter"].tools == ("notes__add_note", "jira_get_issue")
    assert [s.name for s in catalog.mcp_servers] == ["notes"]
    with pytest.raises(ConfigError, match=r"notes\.add_note names an MCP server that `mcp_servers` does not declare"):
        parse_agents({"agents": {"noter": agent}}, "a.yaml", {"jira_get_issue"})
    flow = {"owner": "o", "steps": [{"id": "a", "tool": "other.x", "args": {}}]}
    with pytest.raises(ConfigError, match=r"workflow 'f': other\.x names an MCP server"):
        parse_agents({"agents": {"noter": agent}, "mcp_servers": declared, "workflows": {"f": flow}}, "a.yaml", None)


def test_a_url_server_is_sent_the_processs_user_agent_unless_its_headers_name_one() -> None:
    (plain,) = parse({"notes": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer t0ken-123"}}}, "a", {})
    sent = McpLink(plain)._headers()
    assert sent["user-agent"] == user_agent() and f"pid/{os.getpid()} " in sent["user-agent"]
    assert sent["authorization"] == "Bearer t0ken-123"
    (own,) = parse({"notes": {"url": "http://h/mcp", "headers": {"user-agent": "notes-bot/2"}}}, "a", {})
    assert McpLink(own)._headers().get_list("User-Agent") == ["notes-bot/2"]
