"""LangGraph's side of the side-by-side bench: an agent node (the model) and a tools node (the read),
compiled with `PostgresSaver` on a psycopg pool, invoked with durability `sync` (each step's
checkpoint written before the next step runs, as TicketIQ's and DBOS's are). A run is one `invoke`
on a new thread.

The nodes are plain functions that build the messages themselves, not `ToolNode` or a chat model's
wrapper: the least Python a LangGraph agent can run, so the peer's figures are its floor.

Runs on the peers' venv (`bench/peers/requirements.txt`), not the repository's."""

from __future__ import annotations

import uuid
from importlib.metadata import version
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from measure import arguments, database_url, measure, read, reply, report
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool


def main() -> None:
    args = arguments(__doc__)
    url = database_url()

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(isinstance(m, AIMessage) for m in state["messages"])
        answer = reply(turn, args.steps, str(state["messages"][0].content))
        calls = answer.get("calls")
        if isinstance(calls, list):
            tool_calls = [{"name": c["tool"], "args": c["arguments"], "id": c["id"]} for c in calls]
            return {"messages": [AIMessage(content="", tool_calls=tool_calls)]}
        return {"messages": [AIMessage(content=str(answer["text"]))]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        return {
            "messages": [
                ToolMessage(content=str(read(call["args"]["note"])), tool_call_id=call["id"])
                for call in last.tool_calls
            ]
        }

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tools)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")

    # The connection settings LangGraph's documentation gives for PostgresSaver on a pool.
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(url, kwargs=kwargs, min_size=1, max_size=4, open=True) as pool:
        saver = PostgresSaver(pool)
        saver.setup()
        app = graph.compile(checkpointer=saver)

        def run(i: int) -> None:
            config = {"configurable": {"thread_id": str(uuid.uuid4())}}  # a new thread a run
            out = app.invoke({"messages": [HumanMessage(content=f"OPS-{i}")]}, config, durability="sync")
            assert out["messages"][-1].content == "done"

        for i in range(args.warmup):
            run(i)
        report(measure("LangGraph", version("langgraph"), url, args.runs, args.steps, run))


if __name__ == "__main__":
    main()
