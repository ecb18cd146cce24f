"""Tools the engine itself answers, offered besides an agent's own.

`request_input`: the model asks the person who started the run a question. Only a run that may wait
is offered it: the run suspends (its checkpoint written, its lease released) until an input comes by
`POST /v1/runs/{id}/input` or an A2A message on its task, and the input is the call's result. It
changes nothing outside, so it is classed a read and never marked in doubt; its question is filed by
the statement that makes the run wait.

`ENGINE_CALLS`: writes the engine itself makes for an entry point, never a model (a Teams turn's reply,
its hand-on, I12). No agent is offered one and the driver refuses a model's call of one; made by the
engine, each is marked, sent, recorded and settled like any write (I2, I9, I14).
"""

from __future__ import annotations

from ticketiq.tools import teams
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass
from ticketiq.tools.registry import guarded


async def _answered_by_the_engine(ctx: CallContext) -> Outcome:
    # The engine answers this tool from the inputs table; an executor call is a bug, never a send.
    return Outcome(ok=False, error="request_input is answered by the engine, not executed")


REQUEST_INPUT = Tool(
    name="request_input",
    description=(
        "Ask the person who started this run a question and wait for their answer. Use it only when you "
        "cannot go on without information they have. The answer comes back as this call's result."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 4000}},
        "required": ["question"],
        "additionalProperties": False,
    },
    tool_class=ToolClass.READ,
    executor=_answered_by_the_engine,
)

ENGINE_CALLS: dict[str, Tool] = {tool.name: guarded(tool) for tool in (teams.HAND_ON,)}
