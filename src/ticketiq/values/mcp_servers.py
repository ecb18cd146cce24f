"""The agents file's `mcp_servers:` section, checked at start, and the rule that gives each MCP tool its class.

```yaml
mcp_servers:
  notes:
    url: http://127.0.0.1:9100/mcp            # Streamable HTTP; or `command: [python, -m, notes]` for stdio
    headers: {Authorization: "Bearer ${NOTES_TOKEN}"}   # ${VAR} from the environment, never logged
    env: {NOTES_HOME: /srv/notes}             # stdio only: added to the child's environment (${VAR} too)
    trust_annotations: true                   # default false
    tools:                                    # optional, per tool
      add_note: {class: keyed_write, key_argument: request_id}
agents:
  noter:
    tools: [notes.get_note, notes.add_note]   # <server>.<tool>
```

A model is offered such a tool as `notes__add_note` (a function name allows no dot). The class rule is
pure (`tool_class`): a server's annotations are hints it may get wrong, so they count only when the
operator says the server is trusted; everything else is a write, which is never sent twice.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ticketiq.errors import ConfigError

# A separator no server name holds, so `notes__add_note` maps back to one server and one tool.
SEPARATOR = "__"
_SERVER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# `${VAR}`, or `${VAR:-default}` (the shell's form): the default where VAR is unset or empty.
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_SERVER_FIELDS = {"url", "command", "headers", "env", "trust_annotations", "tools"}
_TOOL_FIELDS = {"class", "key_argument", "dedupe_window_s"}
# The classes an operator may give an MCP tool; a delegation or a sub-agent is the engine's own.
RULE_CLASSES = ("read", "write", "keyed_write", "idempotent_write")


@dataclass(frozen=True)
class ToolRule:
    """The operator's word on one tool, over whatever the server says of it."""

    tool_class: str | None = None  # one of RULE_CLASSES
    key_argument: str | None = None  # a keyed write: the argument that carries the step key
    dedupe_window_s: float | None = None  # a keyed write: how long the server dedupes on it (None: for ever)


@dataclass(frozen=True)
class ServerSpec:
    name: str
    url: str | None = None
    command: tuple[str, ...] = ()
    # Values with ${VAR} already put in: secrets, never logged (`secrets` lists them for scrubbing).
    headers: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    trust_annotations: bool = False
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    # What ${VAR}s put into headers and env: masked wherever they could show (a log line, a result).
    put_in: tuple[str, ...] = ()

    @property
    def transport(self) -> str:
        return "streamable-http" if self.url else "stdio"

    @property
    def where(self) -> str:
        """Where the server is, fit for a log line or a page: its URL, or the program it runs."""
        return self.url or " ".join(self.command[:1])

    def secrets(self) -> list[str]:
        """The values the environment gave (a short one would mask the word wherever it stands)."""
        return [v for v in self.put_in if len(v) >= 8]


@dataclass(frozen=True)
class Hints:
    """What the server says of a tool (MCP's ToolAnnotations); None where it says nothing."""

    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None


def offered_name(server: str, tool: str) -> str:
    """The name a model is offered and calls: `notes.add_note` in the agents file is `notes__add_note`."""
    return f"{server}{SEPARATOR}{tool}"


def from_agents_file(name: str) -> str:
    """A tool as an agent names it: `<server>.<tool>` is an MCP server's; any other name is kept as it is."""
    server, dot, tool = name.partition(".")
    return offered_name(server, tool) if dot and server and tool else name


def tool_class(hints: Hints, trusted: bool, rule: ToolRule | None) -> str:
    """The class of one MCP tool: the operator's rule first; a trusted server's hints next (`readOnlyHint` a
    read; `idempotentHint` and not destructive a write that may be sent again with the same arguments);
    every other tool a write, never sent twice."""
    if rule is not None and rule.tool_class is not None:
        return rule.tool_class
    if not trusted:
        return "write"
    if hints.read_only:
        return "read"
    # MCP's default for destructiveHint is true: an idempotent tool counts only when it says it is not.
    if hints.idempotent and hints.destructive is False:
        return "idempotent_write"
    return "write"


def parse(section: Any, source: str, environ: Mapping[str, str] | None = None) -> tuple[ServerSpec, ...]:
    """The `mcp_servers:` mapping, every mistake a ConfigError saying where and what to do."""
    if section is None:
        return ()
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: `mcp_servers` must be a mapping of server name to {{url or command, ...}}")
    env = os.environ if environ is None else environ
    return tuple(_server(str(name), spec, f"{source}: mcp_servers.{name}", env) for name, spec in section.items())


def _server(name: str, spec: Any, where: str, env: Mapping[str, str]) -> ServerSpec:
    if not _SERVER_NAME.match(name):
        raise ConfigError(f"{where}: a server's name is 1-31 of a-z, 0-9 and -, a letter first (no `_`, no `.`)")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping with `url` or `command`")
    unknown = set(spec) - _SERVER_FIELDS
    if unknown:
        raise ConfigError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_SERVER_FIELDS)}")
    url, command = spec.get("url"), spec.get("command")
    if isinstance(url, str):
        url = _expand(url, f"{where}.url", env)
    if (url is None) == (command is None):
        raise ConfigError(f"{where}: give exactly one of `url` (Streamable HTTP) or `command` (stdio)")
    if url is not None and (not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url)):
        raise ConfigError(f"{where}: `url` must be an http:// or https:// URL, e.g. http://127.0.0.1:9100/mcp")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command)
    ):
        raise ConfigError(f"{where}: `command` must be a list of strings, e.g. [python, -m, notes]")
    trusted = spec.get("trust_annotations", False)
    if not isinstance(trusted, bool):
        raise ConfigError(f"{where}: `trust_annotations` must be true or false")
    put_in: list[str] = []
    headers = _strings(spec.get("headers"), f"{where}.headers", env, put_in)
    if headers and url is None:
        raise ConfigError(f"{where}: `headers` are for a server reached by `url`; a `command` server takes `env`")
    return ServerSpec(
        name=name,
        url=url,
        command=tuple(command or ()),
        headers=headers,
        env=_strings(spec.get("env"), f"{where}.env", env, put_in),
        trust_annotations=trusted,
        tools=_rules(spec.get("tools"), f"{where}.tools"),
        put_in=tuple(put_in),
    )


def _strings(given: Any, where: str, env: Mapping[str, str], put_in: list[str]) -> dict[str, str]:
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise ConfigError(f"{where} must be a mapping of names to strings")
    return {str(k): _expand(v, f"{where}.{k}", env, put_in) for k, v in given.items()}


def _expand(value: str, where: str, env: Mapping[str, str], put_in: list[str] | None = None) -> str:
    """`${VAR}` from the environment (`${VAR:-default}`: the default where it is unset or empty); an unset
    variable with no default is an error naming it (never its neighbours' values)."""

    def put(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if env.get(name):
            if put_in is not None:
                put_in.append(env[name])
            return env[name]
        if default is not None:
            return default
        if name not in env:
            raise ConfigError(f"{where} names ${{{name}}}, which is not set in the environment; set {name}")
        return env[name]

    return _VARIABLE.sub(put, value)


def _rules(given: Any, where: str) -> dict[str, ToolRule]:
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ConfigError(f"{where} must be a mapping of tool name to {{class, key_argument, dedupe_window_s}}")
    rules = {}
    for tool, rule in given.items():
        at = f"{where}.{tool}"
        if not isinstance(rule, dict):
            raise ConfigError(f"{at} must be a mapping, e.g. {{class: keyed_write, key_argument: request_id}}")
        unknown = set(rule) - _TOOL_FIELDS
        if unknown:
            raise ConfigError(f"{at} has unknown fields {sorted(unknown)}; allowed: {sorted(_TOOL_FIELDS)}")
        cls = rule.get("class")
        if cls is not None and cls not in RULE_CLASSES:
            raise ConfigError(f"{at}.class must be one of {', '.join(RULE_CLASSES)}")
        key = rule.get("key_argument")
        if key is not None and (not isinstance(key, str) or not key):
            raise ConfigError(f"{at}.key_argument must be the name of one of the tool's arguments")
        if (key is None) != (cls != "keyed_write"):
            raise ConfigError(f"{at}: a keyed_write needs `key_argument` (the argument that carries the step key), "
                              "and only a keyed_write takes one")  # fmt: skip
        window = rule.get("dedupe_window_s")
        if window is not None and (
            isinstance(window, bool) or not isinstance(window, int | float) or window <= 0 or math.isnan(window)
        ):
            raise ConfigError(f"{at}.dedupe_window_s must be a positive number of seconds")
        if window is not None and cls != "keyed_write":
            raise ConfigError(f"{at}.dedupe_window_s is for a keyed_write only")
        rules[str(tool)] = ToolRule(cls, key, None if window is None else float(window))
    return rules
