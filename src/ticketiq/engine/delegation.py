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
    here, once: the claim goes through the same take as the sweep's (I5), so of two claimers one wins,
    and never while this process still drives the child."""
    deps = engine.deps
    sent_at = time.monotonic()
    taken = await deps.store.claim_one(run_id, deps.holder, deps.settings.lease_ttl_s, engine.driving())
    if taken is None:
        return False
    deps.metrics.claimed("delegation")
    return engine.launch(taken, sent_at, claimed=True)


TOOL_NAME = "delegate_to_agent"


def delegation_tool(engine: Engine) -> Tool:
    async def delegate(ctx: CallContext) -> Outcome:
        agent = engine.deps.catalog.get(str(ctx.args["agent"]))
        if agent is None:
            return Outcome(ok=False, error=f"no agent named {ctx.args['agent']}")
        # The child is part of the parent's work: whoever started the parent may read it.
        parent = await engine.get_run(ctx.run_id)
        ctx.before_send()
        child = await engine.create_run(
            agent,
            str(ctx.args["input"]),
            channel="delegation",
            parent_run_id=ctx.run_id,
            delegation_key=ctx.key,
            actor=f"run:{ctx.run_id}",
            created_by=parent.created_by if parent is not None else None,
        )
        if child.status in ("queued", "waiting"):
            await engine.start(child.id)  # False: another process already drives it
        elif child.status == "running":
            await take_over_if_lapsed(engine, child.id)
        ended = await engine.wait_terminal(child.id, timeout_s=engine.deps.settings.delegation_wait_s)
        if ended is not None and ended.status == "succeeded":
            return Outcome(ok=True, result={"run_id": child.id, "status": ended.status, "answer": ended.answer})
        status = ended.status if ended else "missing"
        error = (ended.error if ended else None) or ("child run is gone" if ended is None else "no answer yet")
        return Outcome(
            ok=False,
            result={"run_id": child.id, "status": status},
            error=f"delegated run {child.id} is {status}: {error}",
        )

    return Tool(
        name=TOOL_NAME,
        description="Hand a sub-task to another agent and wait for its answer.",
        parameters=PARAMETERS,
        tool_class=ToolClass.DELEGATION,
        executor=delegate,
    )
