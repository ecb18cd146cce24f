"""The MCP stand-in's pure parts: what a call answers for what the desk came to (a result, an error result,
or a JSON-RPC error for a fault's refusal), and who may reach /mcp under the option `mcp_token`."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, TextContent

from ticketiq.standins.faults import Fault, refusal
from ticketiq.standins.records import Answer, Effect
from ticketiq.standins.vendors.mcp_endpoint import authorized
from ticketiq.standins.vendors.mcp_notes import outcome


def test_an_applied_or_deduped_call_answers_its_body_as_text_and_as_structured_content() -> None:
    for effect in (Effect.APPLIED, Effect.DEDUPED):
        body = {"note_id": "n1", "notebook": "ops", "deduped": effect is Effect.DEDUPED}
        result = outcome(Answer(200, body, effect, "n1"))
        assert not result.is_error
        assert result.structured_content == body
        assert isinstance(result.content[0], TextContent) and json.loads(result.content[0].text) == body


def test_the_tools_own_refusal_is_an_error_result_with_its_message() -> None:
    result = outcome(Answer(404, {"error": "no note n1"}, Effect.REFUSED))
    assert result.is_error and result.structured_content is None
    assert isinstance(result.content[0], TextContent) and result.content[0].text == "no note n1"


@pytest.mark.parametrize("mode", ["429", "500", "500_after_apply"])
def test_a_faults_refusal_is_a_json_rpc_error(mode: str) -> None:
    fault = Fault(vendor="mcp", mode=mode, retry_after_s=2.5)  # type: ignore[arg-type]
    with pytest.raises(MCPError) as raised:
        outcome(refusal(fault))
    assert raised.value.code == INTERNAL_ERROR
    limited = mode == "429"
    assert raised.value.message == ("Rate limit exceeded" if limited else "Internal server error")
    assert raised.value.data == {"status": 429 if limited else 500, "retry_after_s": 2.5 if limited else None}


def test_with_no_token_set_mcp_is_open() -> None:
    assert authorized(None, None)
    assert authorized("Bearer anything", None)
    assert authorized(None, "")  # "" is how POST /_standin/options clears it


@given(token=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40))
def test_only_the_bearer_token_itself_passes(token: str) -> None:
    assert authorized(f"Bearer {token}", token)
    assert authorized(f"bearer {token}", token)  # the scheme is case-insensitive (RFC 7235)
    assert not authorized(None, token)
    assert not authorized(token, token)  # no scheme
    assert not authorized(f"Basic {token}", token)
    assert not authorized(f"Bearer {token}x", token)
    assert not authorized(f"Bearer {token[:-1]}", token)
