"""Every vendor tool, registered once per process from its settings.

Each executor and reader is wrapped the same way: arguments are checked against the tool's schema
before anything is sent, a vendor failure becomes the outcome the model is told (an executor) or
"cannot tell" (a reader), an answer in a shape the adapter does not know is reported rather than
raised (after a write was sent, as uncertain), and no error carries a secret (a vendor may echo one,
a model may repeat one). So an adapter's code is only its vendor's protocol.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from ticketiq.settings import Settings
from ticketiq.tools import a2a_remote, discord, incidentio, jira, knowledge, packages, sqs, teams, webhook
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Reader, Registry, Tool
from ticketiq.tools.http import VendorFailed
from ticketiq.tools.schema import validate

if TYPE_CHECKING:
    from ticketiq.storage.database import Database

log = logging.getLogger(__name__)
# What an adapter raises when a vendor's 2xx answer lacks what its protocol promises.
_UNEXPECTED = (KeyError, IndexError, TypeError, ValueError)


def build_registry(settings: Settings, db: Database | None = None) -> Registry:
    """Every vendor tool; with the process's database, also the tools that read our own tables."""
    registry = Registry()
    for module in (jira, incidentio, teams, discord, sqs, webhook, a2a_remote):
        for tool in module.tools(settings):
            registry.register(guarded(tool))
    for tool in knowledge.tools(db) if db is not None else []:
        registry.register(guarded(tool))
    for tool in packages.installed_tools(settings, registry.tools):  # docs/tools.md: tool packages in Python
        registry.register(guarded(tool))
    return registry


def guarded(tool: Tool) -> Tool:
    async def executor(ctx: CallContext) -> Outcome:
        problem = validate(tool.parameters, ctx.args)
        if problem is not None:
            return Outcome(ok=False, error=f"arguments rejected: {problem}")
        try:
            return _scrubbed(await tool.executor(ctx), ctx)
        except VendorFailed as failed:
            return _scrubbed(failed.outcome, ctx)
        except _UNEXPECTED as exc:
            log.warning("run %s: %s answered in an unexpected shape: %r", ctx.run_id, tool.name, exc)
            # A write's request went out: whether it took effect is unknown, never to be resent.
            error = f"{tool.vendor or tool.name} answered in an unexpected shape ({type(exc).__name__})"
            return Outcome(ok=False, error=error, uncertain=tool.tool_class.changes)

    reader: Reader | None = None
    if tool.reader is not None:
        read = tool.reader

        async def reader(ctx: CallContext) -> ReadBack:
            if validate(tool.parameters, ctx.args) is not None:
                return ReadBack(found=None)
            try:
                found = await read(ctx)
            except VendorFailed as failed:
                # The vendor could not be asked: that is "cannot tell", never "did not land".
                return ReadBack(found=None, outcome=_scrubbed(failed.outcome, ctx))
            except _UNEXPECTED as exc:
                log.warning("run %s: reading back %s failed on its answer: %r", ctx.run_id, tool.name, exc)
                return ReadBack(found=None)
            return found if found.outcome is None else ReadBack(found.found, _scrubbed(found.outcome, ctx))

    return dataclasses.replace(tool, executor=executor, reader=reader)


def _scrubbed(outcome: Outcome, ctx: CallContext) -> Outcome:
    if outcome.error is None:
        return outcome
    error = outcome.error
    for secret in ctx.settings.secrets():
        error = error.replace(secret, "***")
    return dataclasses.replace(outcome, error=error)
