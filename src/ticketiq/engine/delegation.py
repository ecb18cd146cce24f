"""Delegation: a call that hands a sub-task to another agent as a child run.

The child is created with a unique delegation key, the call's key, so asking again with the same key
(a retry, a resume, I9) finds the same child: its answer when it ended, or the live child to wait for.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

PARAMETERS = {
    "type": "object",
    "properties": {
        "agent": {"type": "string", "description": "The agent to hand the sub-task to."},
        "input": {"type": "string", "description": "What the agent is asked to do."},
    },
    "required": ["agent", "input"],
    "additionalProperties": False,
}


async def take_over_if_lapsed(engine: Engine, run_id: str) -> bool:
    """A live child is waited for; one whose lease lapsed (or whose process is dead) is taken over
    here, once: the claim is the sweep's own conditional statement (I5), so of two claimers one wins."""
    sent_at = time.monotonic()
    rows = await engine.deps.db.fetch_all("leader.claim_one", {
        "run_id": run_id, "holder": engine.deps.holder, "ttl": engine.deps.settings.lease_ttl_s,
    })  # fmt: skip
    for row in rows:
        engine.deps.metrics.claimed("delegation")
        engine.launch_claimed(row, sent_at)
    return bool(rows)


def delegation_tool(engine: Engine) -> Tool:
    async def delegate(ctx: CallContext) -> Outcome:
        agent = engine.deps.catalog.get(str(ctx.args["agent"]))
        if agent is None:
            return Outcome(ok=False, error=f"no agent named {ctx.args['agent']}")
        ctx.before_send()
        child = await engine.create_run(
            agent,
            str(ctx.args["input"]),
            channel="delegation",
            parent_run_id=ctx.run_id,
            delegation_key=ctx.key,
            actor=f"run:{ctx.run_id}",
        )
        if child.status in ("queued", "waiting"):
            await engine.start(child.id)  # False: another process already drives it
        elif child.status == "running":
            await take_over_if_lapsed(engine, child.id)
        status = await engine.wait_terminal(child.id, timeout_s=engine.deps.settings.delegation_wait_s)
        row = await engine.deps.db.fetch_one("runs.status", {"run_id": child.id})
        answer = row["answer"] if row else None
        if status == "succeeded":
            return Outcome(ok=True, result={"run_id": child.id, "status": status, "answer": answer})
        error = row["error"] if row else "child run is gone"
        return Outcome(
            ok=False,
            result={"run_id": child.id, "status": status},
            error=f"delegated run {child.id} is {status}: {error or 'no answer yet'}",
        )

    return Tool(
        name="delegate_to_agent",
        description="Hand a sub-task to another agent and wait for its answer.",
        parameters=PARAMETERS,
        tool_class=ToolClass.DELEGATION,
        executor=delegate,
    )
