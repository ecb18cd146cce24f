"""Agent definitions, read from the agents file (TICKETIQ_AGENTS, YAML).

```yaml
agents:
  triage:
    model: triage            # the model name sent to the chat-completions endpoint
    system_prompt: ...
    tools: [jira_get_issue, incidentio_create_incident]
    may_wait: true           # may suspend (for an approval) and is resumed from its checkpoint
    owner: ops-bot           # the run-as principal: its grants decide which tools it may use
    tenant: acme
    on_ticket_events: [jira:issue_created]   # Jira events that start it (POST /v1/ticket-events)
approval_required: [jira_transition]   # tools held for a person's decision (seeded once)
schedules:                   # cron triggers, upserted by name at each start (never duplicated)
  - name: morning-triage
    agent: triage
    cron: "0 9 * * mon-fri"  # five fields, or @hourly, @daily, ...
    timezone: Europe/Berlin  # an IANA zone; default UTC
    input: Triage the open OPS tickets
mcp_servers:                 # MCP servers whose tools agents name as <server>.<tool> (values/mcp_servers.py)
  notes: {url: "http://127.0.0.1:9100/mcp", trust_annotations: true}
workflows:                   # named steps, each a tool call or an agent run: see agents/workflows.py
  follow-up: {owner: ops-bot, steps: [{id: read, tool: jira_get_issue, args: {issue_key: "{{ input.issue }}"}}]}
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ticketiq.agents import workflows as declared_workflows
from ticketiq.errors import ConfigError
from ticketiq.values import mcp_servers as mcp_spec
from ticketiq.values import schedules as cron_rules
from ticketiq.values.mcp_servers import SEPARATOR, from_agents_file
from ticketiq.values.storable import unstorable_at

_AGENT_FIELDS = {"model", "system_prompt", "tools", "may_wait", "owner", "tenant", "description", "on_ticket_events"}


@dataclass(frozen=True)
class Agent:
    name: str
    model: str  # empty: TICKETIQ_MODEL
    system_prompt: str
    tools: tuple[str, ...]
    may_wait: bool
    owner: str
    tenant: str = "default"
    description: str = ""
    on_ticket_events: tuple[str, ...] = ()  # Jira events that start it, e.g. jira:issue_created


@dataclass(frozen=True)
class DeclaredSchedule:
    """A cron trigger the agents file declares (`schedules:`), upserted by its name at start."""

    name: str
    agent: str
    cron: str
    timezone: str
    input: str


@dataclass(frozen=True)
class Catalog:
    agents: dict[str, Agent]
    approval_required: frozenset[str] = field(default_factory=frozenset)
    schedules: tuple[DeclaredSchedule, ...] = ()
    workflows: dict[str, declared_workflows.Workflow] = field(default_factory=dict)
    mcp_servers: tuple[mcp_spec.ServerSpec, ...] = ()  # `mcp_servers:`, their ${VAR}s put in

    def named_tools(self) -> set[str]:
        """Every tool an agent or a workflow names."""
        return {t for a in self.agents.values() for t in a.tools} | {
            t for f in self.workflows.values() for t in f.tools
        }

    def get(self, name: str) -> Agent | None:
        return self.agents.get(name)

    def owner_tools(self) -> dict[str, list[str]]:
        """Each owner and the tools of its agents: the grants seeded at start."""
        out: dict[str, list[str]] = {}
        for agent in self.agents.values():
            out.setdefault(agent.owner, []).extend(t for t in agent.tools if t not in out.get(agent.owner, []))
        for flow in self.workflows.values():  # a workflow's owner runs its tool steps
            out.setdefault(flow.owner, []).extend(t for t in flow.tools if t not in out.get(flow.owner, []))
        return out


def parse(data: Any, source: str, known_tools: set[str] | None = None) -> Catalog:
    if not isinstance(data, dict) or not isinstance(data.get("agents"), dict) or not data["agents"]:
        raise ConfigError(f"{source}: expected a mapping with a non-empty `agents:` mapping")
    mcp_servers = mcp_spec.parse(data.get("mcp_servers"), source)
    agents: dict[str, Agent] = {}
    for name, spec in data["agents"].items():
        where = f"{source}: agent {name!r}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a mapping")
        unknown = set(spec) - _AGENT_FIELDS
        if unknown:
            raise ConfigError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_AGENT_FIELDS)}")
        for required in ("system_prompt", "owner"):
            if not isinstance(spec.get(required), str) or not spec[required]:
                raise ConfigError(f"{where}: `{required}` is required (a non-empty string)")
        tools = spec.get("tools", [])
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise ConfigError(f"{where}: `tools` must be a list of tool names")
        tools = [from_agents_file(t) for t in tools]  # `notes.add_note`: the MCP server notes's tool
        servers = {s.name for s in mcp_servers}
        strangers = [t for t in tools if SEPARATOR in t and t.partition(SEPARATOR)[0] not in servers]
        if strangers:
            named = ", ".join(t.replace(SEPARATOR, ".", 1) for t in strangers)
            raise ConfigError(f"{where}: {named} names an MCP server that `mcp_servers` does not declare; "
                              f"declared: {', '.join(sorted(servers)) or 'none'}")  # fmt: skip
        if known_tools is not None:
            # An MCP server's tool is checked against what the server lists, once it answers (process.py).
            missing = [t for t in tools if t not in known_tools and SEPARATOR not in t]
            if missing:
                raise ConfigError(f"{where}: unknown tools {missing}; known: {sorted(known_tools)}")
        events = spec.get("on_ticket_events", [])
        if not isinstance(events, list) or not all(isinstance(e, str) and e for e in events):
            raise ConfigError(f"{where}: `on_ticket_events` must be a list of Jira event names (jira:issue_created)")
        may_wait = spec.get("may_wait", False)
        if not isinstance(may_wait, bool):
            raise ConfigError(f"{where}: `may_wait` must be true or false")
        agents[str(name)] = Agent(
            name=str(name),
            model=str(spec.get("model") or ""),
            system_prompt=spec["system_prompt"],
            tools=tuple(tools),
            may_wait=may_wait,
            owner=spec["owner"],
            tenant=str(spec.get("tenant", "default")),
            description=str(spec.get("description", "")),
            on_ticket_events=tuple(events),
        )
    approvals = data.get("approval_required", [])
    if not isinstance(approvals, list):
        raise ConfigError(f"{source}: `approval_required` must be a list of tool names")
    flows = declared_workflows.parse(data.get("workflows"), source, agents, known_tools)
    servers = {s.name for s in mcp_servers}
    for flow_name, flow in flows.items():
        strangers = [t for t in flow.tools if SEPARATOR in t and t.partition(SEPARATOR)[0] not in servers]
        if strangers:
            named = ", ".join(t.replace(SEPARATOR, ".", 1) for t in strangers)
            raise ConfigError(f"{source}: workflow {flow_name!r}: {named} names an MCP server that `mcp_servers` "
                              f"does not declare; declared: {', '.join(sorted(servers)) or 'none'}")  # fmt: skip
    return Catalog(agents=agents, approval_required=frozenset(from_agents_file(str(t)) for t in approvals),
                   mcp_servers=mcp_servers,
                   schedules=_schedules(data.get("schedules", []), source, agents),
                   workflows=flows)  # fmt: skip


_SCHEDULE_FIELDS = {"name", "agent", "cron", "timezone", "input"}


def _schedules(data: Any, source: str, agents: dict[str, Agent]) -> tuple[DeclaredSchedule, ...]:
    """The `schedules:` list, each checked as POST /v1/schedules checks one, at start."""
    if not isinstance(data, list):
        raise ConfigError(f"{source}: `schedules` must be a list of {{name, agent, cron, timezone, input}}")
    out: dict[str, DeclaredSchedule] = {}
    for i, spec in enumerate(data):
        where = f"{source}: schedules[{i}]"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where} must be a mapping")
        unknown = set(spec) - _SCHEDULE_FIELDS
        if unknown:
            raise ConfigError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_SCHEDULE_FIELDS)}")
        spec = {"timezone": "UTC", **spec}
        for required in sorted(_SCHEDULE_FIELDS):
            if not isinstance(spec.get(required), str) or not spec[required].strip():
                raise ConfigError(f"{where}: `{required}` is required (a non-empty string)")
        name = spec["name"]
        if name in out:
            raise ConfigError(f"{where}: a schedule named {name!r} is declared twice")
        if spec["agent"] not in agents:
            raise ConfigError(f"{where}: no agent named {spec['agent']!r}; defined: {sorted(agents)}")
        problem = cron_rules.cron_problem(spec["cron"]) or cron_rules.zone_problem(spec["timezone"])
        if problem is not None:
            raise ConfigError(f"{where} ({name}): {problem}")
        out[name] = DeclaredSchedule(name, spec["agent"], spec["cron"].strip(), spec["timezone"], spec["input"])
    return tuple(out.values())


def _storable(data: Any, source: str) -> None:
    """I16: the file's text is stored with every run (system prompts, names): refuse what Postgres cannot
    store at start, with where it is, rather than fail a run later."""
    where = unstorable_at(data)
    if where is not None:
        path = ".".join(str(part) for part in where) or "(the top)"
        raise ConfigError(f"{source}: {path} holds a NUL character or an unpaired surrogate; remove it")


def _at(exc: yaml.YAMLError) -> str:
    """Where and what, on one line: the parser's own text spans several, with a caret drawing."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{where}: {problem}" if problem else where


def load(path: Path, known_tools: set[str] | None = None) -> Catalog:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"agents file {path} does not exist; set TICKETIQ_AGENTS to an agents file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"agents file {path} is not valid YAML{_at(exc)}; fix it or set TICKETIQ_AGENTS to "
                          "another agents file") from exc  # fmt: skip
    _storable(data, str(path))
    return parse(data, str(path), known_tools)
