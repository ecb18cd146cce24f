"""The scripted model's decisions, no server: which step answers, what placeholders become, call ids."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.chat import ChatCompletion

from ticketiq.errors import ConfigError
from ticketiq.standins.model import (
    NO_JIRA_KEY,
    RequestRejected,
    RunFacts,
    ScriptedModel,
    call_id,
    check_conversation,
    completion,
    fill,
    find_jira_key,
    parse_script,
)

PROVIDER_ID = re.compile(r"^call_[0-9A-Za-z]{24}$")


@pytest.fixture(scope="module")
def scripted() -> ScriptedModel:
    return ScriptedModel()


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def answer(messages: list[dict[str, Any]], reply: dict[str, Any], *results: Any) -> list[dict[str, Any]]:
    out = [*messages, reply]
    for call, result in zip(reply.get("tool_calls", []), results, strict=True):
        out.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    return out


def calls(reply: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in reply["tool_calls"]]


def test_the_shipped_scripts_load_and_end_in_text(scripted: ScriptedModel) -> None:
    assert sorted(scripted.scripts) == [
        "asker", "closer", "consultant", "delegator", "librarian", "noter", "reader", "tck", "triage", "writer",
    ]  # fmt: skip
    triage = scripted.scripts["triage"]
    assert [[c.tool for c in s.calls] for s in triage.steps] == [
        ["jira_get_issue"],
        ["incidentio_create_incident"],
        ["jira_add_comment", "teams_reply"],
        [],
    ]
    reader = scripted.scripts["reader"]
    assert [[c.tool for c in s.calls] for s in reader.steps] == [["jira_get_issue"]] * 3 + [[]]
    assert all(s.steps[-1].text for s in scripted.scripts.values())


def test_triage_walks_its_steps_by_the_assistant_messages_held(scripted: ScriptedModel) -> None:
    messages = user("checkout broken: OPS-123")
    first = scripted.reply("triage", messages)
    assert calls(first) == [("jira_get_issue", {"issue_key": "OPS-123"})]

    messages = answer(messages, first, {"key": "OPS-123"})
    second = scripted.reply("triage", messages)
    [(tool, arguments)] = calls(second)
    assert tool == "incidentio_create_incident"
    assert arguments["name"].startswith("OPS-123: ")
    assert arguments["severity"] == "minor"
    assert "checkout broken: OPS-123" in arguments["summary"]

    messages = answer(messages, second, {"incident": {"id": "01HZ9"}})
    third = scripted.reply("triage", messages)
    (comment_tool, comment), (reply_tool, reply) = calls(third)
    assert (comment_tool, reply_tool) == ("jira_add_comment", "teams_reply")
    assert comment["issue_key"] == "OPS-123"
    assert comment["body"].startswith("Incident 01HZ9 opened")
    assert set(reply) == {"conversation_id", "activity_id", "text", "team_id"}

    messages = answer(messages, third, {"id": "1"}, {"id": "2"})
    final = scripted.reply("triage", messages)
    assert "tool_calls" not in final
    assert "OPS-123" in final["content"]
    assert "01HZ9" in final["content"]
    # Asked again past the end: the final answer again, not an error.
    assert scripted.reply("triage", [*messages, final, {"role": "user", "content": "and?"}]) == final


def test_a_missing_result_says_so(scripted: ScriptedModel) -> None:
    messages = user("OPS-1")
    first = scripted.reply("triage", messages)
    messages = answer(messages, first, {"key": "OPS-1"})
    second = scripted.reply("triage", messages)
    messages = answer(messages, second, {"error": "incident.io refused"})
    [(_, comment), _] = calls(scripted.reply("triage", messages))
    assert comment["body"].startswith("Incident <no result:incidentio_create_incident.incident.id> opened")


def test_the_delegator_quotes_the_childs_answer_or_its_fallback(scripted: ScriptedModel) -> None:
    messages = user("please check SUP-4")
    first = scripted.reply("delegator", messages)
    assert calls(first) == [("delegate_to_agent", {"agent": "reader", "input": "look at SUP-4"})]
    told = scripted.reply("delegator", answer(messages, first, {"answer": "it is fine"}))
    assert told["content"].endswith("said: it is fine")
    silent = scripted.reply("delegator", answer(messages, first, {"error": "child failed"}))
    assert silent["content"].endswith("said: no answer came back")


def test_the_writer_asks_for_three_writes_in_one_step(scripted: ScriptedModel) -> None:
    reply = scripted.reply("writer", user("OPS-77 rolled back"))
    assert calls(reply) == [
        ("discord_send_message", {"channel_id": "ops", "content": "OPS-77: OPS-77 rolled back"}),
        ("sqs_send_message", {"message_body": "OPS-77 rolled back", "message_group_id": "OPS-77"}),
        (
            "webhook_post",
            {
                "path": "hooks/ops",
                "payload": {"issue_key": "OPS-77", "event": "triaged", "input": "OPS-77 rolled back"},
            },
        ),
    ]


def test_jira_key_is_the_first_key_of_the_first_user_message() -> None:
    assert find_jira_key("see OPS-12 and SUP-3") == "OPS-12"
    assert find_jira_key("A2B-9 first") == "A2B-9"
    assert find_jira_key("ops-12 is lower case, X-1 too short") is None
    facts = RunFacts.of(
        [
            {"role": "system", "content": "mention SYS-1"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "about "}, {"type": "text", "text": "INC-5"}],
            },
            {"role": "user", "content": "and OPS-2"},
        ]
    )
    assert (facts.input, facts.jira_key) == ("about INC-5", "INC-5")
    assert RunFacts.of(user("no key here")).jira_key == NO_JIRA_KEY


def test_fill_keeps_a_lone_placeholders_type_and_walks_paths() -> None:
    messages = [
        *user("OPS-3"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "count", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "count", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"items": [{"n": 1}]}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"items": [{"n": 2}, {"n": 3}]}'},
    ]
    facts = RunFacts.of(messages)
    template = {
        "n": "{result:count.items.1.n}",
        "items": ["{result:count.items}"],
        "said": "n={result:count.items.0.n} for {jira_key}",
        "gone": "{result:count.items.9.n|none}",
        "unknown": "{result:other.x}",
        "braces": "{not a placeholder}",
    }
    assert fill(template, facts) == {
        "n": 3,
        "items": [[{"n": 2}, {"n": 3}]],
        "said": "n=2 for OPS-3",
        "gone": "none",
        "unknown": "<no result:other.x>",
        "braces": "{not a placeholder}",
    }


def test_position_ids_and_provider_looking_ids() -> None:
    assert [call_id("m", "x", 0, i, position_ids=True) for i in range(3)] == ["call_0", "call_1", "call_2"]
    derived = call_id("triage", "OPS-1", 0, 0, position_ids=False)
    assert PROVIDER_ID.match(derived)
    assert derived == call_id("triage", "OPS-1", 0, 0, position_ids=False)


@given(
    st.tuples(st.sampled_from(["triage", "reader"]), st.text(max_size=20), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.sampled_from(["triage", "reader"]), st.text(max_size=20), st.integers(0, 5), st.integers(0, 3)),
)
def test_derived_ids_differ_when_what_identifies_the_call_differs(
    one: tuple[str, str, int, int], two: tuple[str, str, int, int]
) -> None:
    first = call_id(*one, position_ids=False)
    second = call_id(*two, position_ids=False)
    assert PROVIDER_ID.match(first)
    assert (first == second) == (one == two)


def test_an_unknown_model_is_refused_like_openai(scripted: ScriptedModel) -> None:
    with pytest.raises(RequestRejected) as caught:
        scripted.reply("gpt-9", user("OPS-1"))
    assert caught.value.status == 404
    assert caught.value.body()["error"]["code"] == "model_not_found"
    # Without a folder of one's own: the file to write and how to hand the folder to the stand-ins.
    assert "no script gpt-9.yaml; write gpt-9.yaml in a folder of your own" in caught.value.message
    assert "--scripts FOLDER or TICKETIQ_STANDIN_SCRIPTS=FOLDER" in caught.value.message


def test_own_scripts_add_to_the_shipped_ones_and_a_missing_one_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text('steps:\n  - text: "mine on {jira_key}"\n')
    (tmp_path / "reader.yaml").write_text('steps:\n  - text: "my reader"\n')
    model = ScriptedModel(own=tmp_path)
    assert model.reply("mine", user("OPS-5"))["content"] == "mine on OPS-5"
    assert model.reply("reader", user("OPS-5"))["content"] == "my reader"  # ours replaces the shipped one
    assert model.reply("triage", user("OPS-5"))["tool_calls"]  # the shipped ones stay
    with pytest.raises(RequestRejected) as caught:
        model.reply("gpt-4o-mini", user("OPS-5"))
    assert caught.value.status == 404
    assert f"write {tmp_path.resolve() / 'gpt-4o-mini.yaml'} " in caught.value.message


def test_own_scripts_folder_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a folder; create it"):
        ScriptedModel(own=tmp_path / "absent")


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        (None, "must be a non-empty array"),
        ([], "must be a non-empty array"),
        ([{"role": "robot", "content": "hi"}], "must be an object with a role"),
        (
            [*user("OPS-1"), {"role": "tool", "tool_call_id": "call_x", "content": "{}"}],
            "'call_x' answers no open call",
        ),
        (
            [
                *user("OPS-1"),
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
                },
                {"role": "user", "content": "more"},
            ],
            "did not have response messages: a",
        ),
        (
            [
                *user("OPS-1"),
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                        {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "{}"},
            ],
            "did not have response messages: b",
        ),
        (
            [*user("OPS-1"), {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "t"}}]}],
            "needs an id and a function name and arguments string",
        ),
    ],
)
def test_conversations_openai_would_refuse_are_400s(messages: Any, says: str) -> None:
    with pytest.raises(RequestRejected, match=re.escape(says)) as caught:
        check_conversation(messages)
    assert caught.value.status == 400
    assert caught.value.body()["error"]["type"] == "invalid_request_error"


def test_an_answered_tool_call_cannot_be_answered_twice() -> None:
    call = {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    result = {"role": "tool", "tool_call_id": "a", "content": "{}"}
    with pytest.raises(RequestRejected, match="answers no open call"):
        check_conversation([*user("OPS-1"), {"role": "assistant", "tool_calls": [call]}, result, result])


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({}, "non-empty `steps` list"),
        ({"steps": []}, "non-empty `steps` list"),
        ({"steps": [{"text": "a", "calls": []}]}, "step 1 must have exactly one of"),
        ({"steps": [{"calls": []}, {"text": "a"}]}, "step 1: `calls` must be a non-empty list"),
        ({"steps": [{"calls": [{"arguments": {}}]}, {"text": "a"}]}, "each call needs a `tool` name"),
        ({"steps": [{"calls": [{"tool": "t", "arguments": [1]}]}, {"text": "a"}]}, "an `arguments` mapping"),
        ({"steps": [{"text": "a"}, {"calls": [{"tool": "t"}]}]}, "the last step must be a `text` answer"),
        ({"steps": [{"text": 3}]}, "`text` must be a string"),
    ],
)
def test_malformed_scripts_are_refused_with_the_step(data: Any, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_script("broken", data)


def test_a_scripts_folder_of_ones_own(tmp_path: Path) -> None:
    (tmp_path / "echo.yaml").write_text('steps:\n  - text: "you said: {input}"\n', encoding="utf-8")
    scripted = ScriptedModel(tmp_path)
    assert scripted.reply("echo", user("hello"))["content"] == "you said: hello"


def test_the_completion_body_parses_as_an_openai_chat_completion(scripted: ScriptedModel) -> None:
    messages = user("OPS-1")
    step = scripted.reply("triage", messages)
    parsed = ChatCompletion.model_validate(completion("triage", messages, step))
    assert parsed.choices[0].finish_reason == "tool_calls"
    assert parsed.choices[0].message.tool_calls is not None
    assert parsed.usage is not None
    assert parsed.usage.total_tokens == parsed.usage.prompt_tokens + parsed.usage.completion_tokens
    text = scripted.reply("reader", [{"role": "user", "content": "x"}, {"role": "assistant", "content": "-"}] * 3)
    assert ChatCompletion.model_validate(completion("reader", [], text)).choices[0].finish_reason == "stop"
