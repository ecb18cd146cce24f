"""Tool packages (tools/packages.py): the example package's real entry point is found and its tools join the
one registry as built-in ones do; whatever is wrong with a package is a ConfigError naming it."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pytest

from ticketiq.engine.delegation import TOOL_NAME as DELEGATION_TOOL
from ticketiq.errors import ConfigError
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.packages import ENGINE_NAMES, GROUP, admitted, describe, installed_tools, load, offered_by
from ticketiq.tools.registry import build_registry

SOURCE = "tool package acme-tools, entry point 'acme' (acme.tools:tools) of group ticketiq.tools"


async def _executor(ctx: CallContext) -> Outcome:
    return Outcome(ok=True)


async def _reader(ctx: CallContext) -> ReadBack:
    return ReadBack(found=False)


def tool(name: str = "acme_create", tool_class: ToolClass = ToolClass.WRITE, **more: Any) -> Tool:
    return Tool(name, "Create an acme.", {"type": "object", "properties": {}}, tool_class, _executor, **more)


def test_the_example_package_is_found_by_its_entry_point_and_registered_as_a_built_in_tool_is() -> None:
    declared = [e for e in entry_points(group=GROUP) if e.dist is not None and e.dist.name == "ticketiq-tasks"]
    assert [(e.name, e.value) for e in declared] == [("tasks", "ticketiq_tasks.tools:tools")]
    found = {t.name: t for t in installed_tools(Settings(), registered=["jira_get_issue"])}
    assert set(found) == {"tasks_get", "tasks_create"}
    assert (found["tasks_create"].tool_class, found["tasks_create"].reader is not None) == (ToolClass.WRITE, True)
    assert (found["tasks_get"].tool_class, found["tasks_get"].reader) == (ToolClass.READ, None)
    registry = build_registry(Settings())
    create = registry.tools["tasks_create"]
    # Registered through `guarded`, as every built-in is: its executor and reader are the wrapped ones.
    assert create.executor is not found["tasks_create"].executor
    assert create.reader is not None and create.reader is not found["tasks_create"].reader
    assert registry.tools["jira_add_comment"].vendor == "jira"  # the built-ins are all still there


def test_a_package_tool_named_as_a_built_in_one_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as refused:
        installed_tools(Settings(), registered=["tasks_create"])
    message = str(refused.value)
    assert "ticketiq-tasks" in message and "'tasks'" in message, message
    assert "'tasks_create' is already registered by a built-in tool" in message, message


def test_an_entry_point_that_cannot_be_imported_is_named() -> None:
    entry = EntryPoint("broken", "ticketiq_no_such_module:tools", GROUP)
    with pytest.raises(ConfigError) as refused:
        load(entry, describe(entry))
    message = str(refused.value)
    assert "entry point 'broken' (ticketiq_no_such_module:tools)" in message, message
    assert "cannot be imported (ModuleNotFoundError" in message, message


def test_an_entry_point_naming_no_callable_is_named() -> None:
    entry = EntryPoint("constant", "ticketiq.tools.packages:GROUP", GROUP)
    with pytest.raises(ConfigError, match=r"'constant' .*names a str, not a callable"):
        load(entry, describe(entry))


def test_a_package_whose_tools_raise_is_named_with_what_it_raised() -> None:
    def tools(settings: Settings) -> list[Tool]:
        raise KeyError("ACME_URL")

    with pytest.raises(ConfigError, match=r"acme-tools.*tools\(settings\) failed \(KeyError: 'ACME_URL'\)"):
        offered_by(SOURCE, tools, Settings(), {})


def test_what_is_not_a_tool_is_refused_with_its_position() -> None:
    with pytest.raises(ConfigError, match=r"acme-tools.*item 1 .* is a dict, not a ticketiq.tools.base.Tool"):
        admitted(SOURCE, [tool(), {"name": "acme_read"}], {})
    with pytest.raises(ConfigError, match=r"tools.*failed.*TypeError"):  # not even an iterable
        offered_by(SOURCE, lambda settings: None, Settings(), {})  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize("name", ["", "a" * 65, "acme create", "acme.create", "acme/create", "ünï", "acme\n"])
def test_a_name_a_model_provider_would_refuse_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{SOURCE}: tool name {name!r} is not valid")):
        admitted(SOURCE, [tool(name)], {})


@pytest.mark.parametrize("name", ["a", "a" * 64, "Acme-Create_2"])
def test_a_name_within_the_providers_rule_is_admitted(name: str) -> None:
    assert [t.name for t in admitted(SOURCE, [tool(name)], {})] == [name]


def test_a_name_another_package_or_the_same_one_took_is_refused_naming_who() -> None:
    other = "tool package beta-tools, entry point 'beta' (beta:tools) of group ticketiq.tools"
    with pytest.raises(ConfigError, match=r"'acme_create' is already registered by tool package beta-tools"):
        admitted(SOURCE, [tool()], {"acme_create": other})
    with pytest.raises(ConfigError, match="'acme_create' is already registered by itself"):
        admitted(SOURCE, [tool(), tool()], {})


@pytest.mark.parametrize("tool_class", [ToolClass.DELEGATION, ToolClass.SUBAGENT, ToolClass.REMOTE_AGENT])
def test_the_engine_s_own_classes_are_not_a_package_s_to_declare(tool_class: ToolClass) -> None:
    with pytest.raises(ConfigError, match="a package declares one of read, write, keyed_write, idempotent_write"):
        admitted(SOURCE, [tool(tool_class=tool_class)], {})


def test_a_read_with_a_reader_is_refused_and_a_write_with_one_admitted() -> None:
    with pytest.raises(ConfigError, match="'acme_get' is a read with a reader"):
        admitted(SOURCE, [tool("acme_get", ToolClass.READ, reader=_reader)], {})
    keyed = tool("acme_keyed", ToolClass.KEYED_WRITE, reader=_reader, dedupe_window_s=86400.0)
    assert admitted(SOURCE, [tool(reader=_reader), keyed], {}) == [tool(reader=_reader), keyed]


def test_the_names_the_engine_registers_later_are_taken_before_any_package_s() -> None:
    assert DELEGATION_TOOL in ENGINE_NAMES
    assert not ENGINE_NAMES & set(build_registry(Settings()).tools)
