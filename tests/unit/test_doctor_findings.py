"""The doctor's word on one MCP server, from the view a process reports of it (McpLink.view)."""

from __future__ import annotations

from ticketiq.operate.doctor import Finding, server_problem


def _view(state: str, error: str | None = None, tools: list[str] | None = None) -> dict[str, object]:
    return {"name": "notes", "transport": "streamable-http", "where": "http://h/mcp", "state": state,
            "error": error, "tools": tools or []}  # fmt: skip


def test_a_ready_server_is_fine_and_counts_its_tools() -> None:
    problem, detail = server_problem(_view("ready", tools=["a", "b"]), 10.0, [])
    assert Finding("mcp notes", problem, detail).line() == "ok    mcp notes: ready at http://h/mcp, 2 tool(s)"


def test_an_unreachable_server_is_named_with_its_error_and_no_secret() -> None:
    view = _view("unreachable", error="HTTPStatusError: 401 for Bearer s3cret-token-xyz")
    problem, _ = server_problem(view, 10.0, ["s3cret-token-xyz"])
    assert Finding("mcp notes", problem).line() == (
        "WRONG mcp notes: unreachable at http://h/mcp: HTTPStatusError: 401 for Bearer ***"
    )


def test_a_server_still_connecting_after_the_wait_is_wrong_and_names_the_setting() -> None:
    problem, _ = server_problem(_view("connecting"), 2.5, [])
    assert problem == "no answer from http://h/mcp in 2.5 s (TICKETIQ_MCP_START_WAIT_S)"
