"""MCP servers' tools as tools of this process: the same `Tool` as every built-in, in the one registry,
driven through the one in-doubt sequence (nothing downstream knows a tool came from an MCP server).

- Each tool is registered as `<server>__<tool>` with the class `values.mcp_servers.tool_class` gives it;
  a keyed write's `key_argument` is taken out of the schema the model is offered and carries the step
  key when it is sent.
- A tool an agent names is registered before its server answers (the process starts whatever the
  server does), as a write until listed; the listing gives it its schema and class. A server that
  answered and does not list it is an error at start (`McpServers.unlisted`).
- The class is kept in the checkpoint with each call (I10), so what a server says later never turns a
  write into something sent twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from mcp import types
from mcp.shared.exceptions import MCPError

from ticketiq.tools.base import CallContext, Outcome, Registry, Tool, ToolClass
from ticketiq.tools.http import last_check
from ticketiq.tools.mcp_link import ListedTool, McpLink, NotSent
from ticketiq.tools.registry import guarded
from ticketiq.values.mcp_servers import SEPARATOR, Hints, ServerSpec, ToolRule, offered_name, tool_class

log = logging.getLogger(__name__)

# Errors with which the server refused the request itself: nothing was done (a write is not in doubt).
_REFUSED = {types.INVALID_PARAMS, types.METHOD_NOT_FOUND, types.PARSE_ERROR, types.INVALID_REQUEST}
_UNLISTED_SCHEMA = {"type": "object"}


class McpServers:
    """The links to every MCP server of the agents file, and the tools they give the registry."""

    def __init__(self, specs: Iterable[ServerSpec], on_change: Callable[[], Awaitable[None]] | None = None) -> None:
        self.links = {spec.name: McpLink(spec, self._changed) for spec in specs}
        self._registry: Registry | None = None
        self._named: set[str] = set()
        self.on_change = on_change  # told when a link's state or listing changed

    def secrets(self) -> list[str]:
        return [secret for link in self.links.values() for secret in link.spec.secrets()]

    async def start(self, wait_s: float) -> None:
        """Open every link and wait (at most `wait_s` in all) for each first listing or first failure."""
        for link in self.links.values():
            link.start()
        deadline = time.monotonic() + wait_s
        for link in self.links.values():
            left = deadline - time.monotonic()
            if left > 0:
                try:
                    async with asyncio.timeout(left):
                        await link.listed.wait()
                except TimeoutError:
                    pass

    async def stop(self) -> None:
        for link in self.links.values():
            await link.stop()

    def views(self) -> list[dict[str, Any]]:
        return [link.view() for link in self.links.values()]

    def register(self, registry: Registry, named: Iterable[str]) -> None:
        """Every tool the servers listed, and every `<server>__<tool>` an agent names (`named`), into the
        registry; kept up to date as the servers list again."""
        self._registry = registry
        self._named = {n for n in named if n.partition(SEPARATOR)[0] in self.links and SEPARATOR in n}
        for link in self.links.values():
            self._put(link)

    def unlisted(self, only: str | None = None) -> list[str]:
        """What an agent names that its server, having answered, does not list: one line each (of the
        server `only`, when given)."""
        out = []
        for name in sorted(self._named):
            server, _, tool = name.partition(SEPARATOR)
            if only is not None and server != only:
                continue
            link = self.links[server]
            if link.state.value == "ready" and tool not in link.tools:
                listed = ", ".join(sorted(link.tools)) or "no tools"
                out.append(f"MCP server {server} does not list the tool {tool} ({server}.{tool}); it lists: {listed}")
        return out

    async def _changed(self, link: McpLink) -> None:
        if self._registry is not None:
            self._put(link)
        if self.on_change is not None:
            await self.on_change()

    def _put(self, link: McpLink) -> None:
        assert self._registry is not None
        names = set(link.tools) | {
            n.partition(SEPARATOR)[2] for n in self._named if n.startswith(link.name + SEPARATOR)
        }
        for tool in names:
            built = tool_for(link, tool, link.tools.get(tool))
            # Listed again: the tool as it is now replaces the one registered (the registry is read per step).
            self._registry.tools[built.name] = guarded(built)


def tool_for(link: McpLink, name: str, listed: ListedTool | None) -> Tool:
    """One MCP tool as a `Tool`; `listed` None: named by an agent, not (yet) listed by its server."""
    spec = link.spec
    rule = spec.tools.get(name)
    hints = listed.hints if listed is not None else Hints()
    cls = ToolClass(tool_class(hints, spec.trust_annotations and listed is not None, rule))
    schema = offered_schema(listed.input_schema if listed else _UNLISTED_SCHEMA, rule)
    description = listed.description if listed and listed.description else f"{name} on the MCP server {spec.name}"
    window = None
    if cls is ToolClass.KEYED_WRITE and rule is not None:
        window = rule.dedupe_window_s if rule.dedupe_window_s is not None else math.inf
    return Tool(
        name=offered_name(spec.name, name),
        description=description,
        parameters=schema,
        tool_class=cls,
        executor=_executor(link, name, rule, cls),
        dedupe_window_s=window,
        vendor=f"MCP server {spec.name}",
    )


def offered_schema(schema: dict[str, Any], rule: ToolRule | None) -> dict[str, Any]:
    """The input schema the model is offered: a keyed write's key argument is ours to fill, not the model's."""
    out = dict(schema) if schema.get("type") == "object" else {"type": "object", **schema}
    if rule is None or rule.key_argument is None:
        return out
    key = rule.key_argument
    out["properties"] = {k: v for k, v in (out.get("properties") or {}).items() if k != key}
    if "required" in out:
        out["required"] = [r for r in out["required"] if r != key]
    return out


def _executor(
    link: McpLink, name: str, rule: ToolRule | None, cls: ToolClass
) -> Callable[[CallContext], Awaitable[Outcome]]:
    async def execute(ctx: CallContext) -> Outcome:
        args = dict(ctx.args)
        if rule is not None and rule.key_argument is not None:
            args[rule.key_argument] = ctx.key  # I11: the step key, where the server dedupes on it
        timeout = ctx.settings.http_timeout_s
        if ctx.window is not None:
            now = time.monotonic()
            if not ctx.window.may_send(now):
                return Outcome(
                    ok=False, error=f"MCP server {link.name}: the write's budget was spent before it was sent"
                )
            timeout = ctx.window.try_timeout(now, timeout)
        try:
            # The window is checked as the bytes go (last_check), but a failure is judged by the lease alone:
            # a request that went out whole and then timed out at its window's end is uncertain, not unsent.
            result = await link.call(name, args, timeout, ctx.lost, ctx.before_send, last_check(ctx))
        except NotSent as exc:
            return Outcome(ok=False, error=str(exc))
        except MCPError as exc:
            refused = exc.code in _REFUSED
            error = f"MCP server {link.name} answered {name} with an error: {exc.message}"
            if not refused:
                error = f"MCP server {link.name} did not answer {name} ({exc.message})"
            return Outcome(ok=False, error=error, uncertain=cls.changes and not refused)
        return masked(outcome_of(result), link.spec.secrets())

    return execute


def outcome_of(result: types.CallToolResult) -> Outcome:
    """What the model is told: the structured content when there is one, else the text (JSON when it is)."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if result.is_error:
        # The tool ran and said it failed: an answer, not an open question.
        return Outcome(ok=False, error=" ".join(texts) or "the tool reported an error")
    if result.structured_content is not None:
        return Outcome(ok=True, result=result.structured_content)
    if len(texts) == 1:
        try:
            return Outcome(ok=True, result=json.loads(texts[0]))
        except ValueError:
            return Outcome(ok=True, result=texts[0])
    others = [block.type for block in result.content if not isinstance(block, types.TextContent)]
    return Outcome(ok=True, result={"text": "\n".join(texts), **({"other_content": others} if others else {})})


def masked(outcome: Outcome, secrets: list[str]) -> Outcome:
    """A server may echo what it was sent: its headers' and environment's values never reach a transcript."""
    if not secrets:
        return outcome

    def mask(value: Any) -> Any:
        if isinstance(value, str):
            for secret in secrets:
                value = value.replace(secret, "***")
            return value
        if isinstance(value, list):
            return [mask(v) for v in value]
        if isinstance(value, dict):
            return {k: mask(v) for k, v in value.items()}
        return value

    return Outcome(outcome.ok, mask(outcome.result), mask(outcome.error), outcome.uncertain)
