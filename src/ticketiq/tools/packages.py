"""Tools from installed Python packages: every entry point of the group `ticketiq.tools` (docs/tools.md).

An entry point names a callable `tools(settings) -> Iterable[Tool]`, the shape of each built-in vendor
module's. What it returns is registered as a built-in tool is (`registry.guarded`) and driven through the
same in-doubt sequence: a package's tool differs from a built-in one only in where its code came from.
Whatever is wrong with a package is a ConfigError naming its entry point, raised when the process starts
(`ticketiq serve` prints it as one line), never at the first call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import EntryPoint, entry_points

from ticketiq.errors import ConfigError
from ticketiq.settings import Settings
from ticketiq.tools.base import Tool, ToolClass

GROUP = "ticketiq.tools"
# What the model providers accept as a function name (OpenAI's rule; Anthropic's is the same).
NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
# The classes a package may declare. Delegation, sub-agents and remote agents are the engine's own: their
# settlement asks again by a delegation key or reads back by a task id the engine records.
PACKAGE_CLASSES = (ToolClass.READ, ToolClass.WRITE, ToolClass.KEYED_WRITE, ToolClass.IDEMPOTENT_WRITE)

# Names the engine registers after the tools (engine/delegation.TOOL_NAME, which this layer may not import;
# tests/unit/test_tool_packages.py holds the two equal): a package taking one would stop the start later.
ENGINE_NAMES = frozenset({"delegate_to_agent"})

ToolsOf = Callable[[Settings], Iterable[Tool]]


def installed_tools(settings: Settings, registered: Iterable[str]) -> list[Tool]:
    """Every tool of every installed package, checked against the names already `registered` and each other."""
    claimed = dict.fromkeys(registered, "a built-in tool") | dict.fromkeys(ENGINE_NAMES, "the engine")
    found: list[Tool] = []
    for entry in sorted(entry_points(group=GROUP), key=lambda e: (e.name, e.value)):
        source = describe(entry)
        offered = offered_by(source, load(entry, source), settings, claimed)
        for tool in offered:
            claimed[tool.name] = source
        found += offered
    return found


def describe(entry: EntryPoint) -> str:
    package = entry.dist.name if entry.dist is not None else "an unnamed distribution"
    return f"tool package {package}, entry point {entry.name!r} ({entry.value}) of group {GROUP}"


def load(entry: EntryPoint, source: str) -> ToolsOf:
    """The entry point's callable; an import that fails or names no callable is a ConfigError."""
    try:
        loaded = entry.load()
    except Exception as exc:  # ImportError, AttributeError, or whatever the module raised on import
        raise ConfigError(f"{source}: cannot be imported ({type(exc).__name__}: {exc})") from exc
    if not callable(loaded):
        raise ConfigError(
            f"{source}: names a {type(loaded).__name__}, not a callable; it must name `tools(settings)` "
            "returning the package's Tools"
        )
    tools_of: ToolsOf = loaded
    return tools_of


def offered_by(source: str, tools_of: ToolsOf, settings: Settings, claimed: Mapping[str, str]) -> list[Tool]:
    """What one package's `tools(settings)` returns, admitted; its own failure is named with its source."""
    try:
        offered = list(tools_of(settings))
    except Exception as exc:  # its ConfigError too: the message says which package is misconfigured
        raise ConfigError(f"{source}: its tools(settings) failed ({type(exc).__name__}: {exc})") from exc
    return admitted(source, offered, claimed)


def admitted(source: str, offered: Iterable[object], claimed: Mapping[str, str]) -> list[Tool]:
    """The tools a package offers, each checked; `claimed` maps the names taken so far to who took them."""
    tools: list[Tool] = []
    seen: dict[str, str] = dict(claimed)
    for position, tool in enumerate(offered):
        if not isinstance(tool, Tool):
            raise ConfigError(
                f"{source}: item {position} of what tools(settings) returned is a {type(tool).__name__}, "
                "not a ticketiq.tools.base.Tool"
            )
        if not isinstance(tool.name, str) or not NAME.fullmatch(tool.name):
            raise ConfigError(
                f"{source}: tool name {tool.name!r} is not valid: 1-64 letters, digits, '_' or '-' "
                "(what the model providers accept as a function name)"
            )
        if tool.name in seen:
            other = seen[tool.name]
            owner = "itself" if other == source else other
            raise ConfigError(f"{source}: tool {tool.name!r} is already registered by {owner}; rename one of them")
        if not isinstance(tool.tool_class, ToolClass) or tool.tool_class not in PACKAGE_CLASSES:
            allowed = ", ".join(c.value for c in PACKAGE_CLASSES)
            raise ConfigError(
                f"{source}: tool {tool.name!r} has class {tool.tool_class!r}; a package declares one of {allowed}"
            )
        if not callable(tool.executor) or (tool.reader is not None and not callable(tool.reader)):
            raise ConfigError(f"{source}: tool {tool.name!r} needs a callable executor (and reader, if any)")
        if tool.reader is not None and not tool.tool_class.changes:
            raise ConfigError(f"{source}: tool {tool.name!r} is a read with a reader; only a write is read back")
        seen[tool.name] = source
        tools.append(tool)
    return tools
