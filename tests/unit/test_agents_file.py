from __future__ import annotations

from pathlib import Path

import pytest

from ticketiq.agents.catalog import load
from ticketiq.errors import ConfigError


def test_an_agents_file_holding_text_postgres_cannot_store_is_refused_saying_where(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text('agents:\n  a:\n    system_prompt: "You help.\\0"\n    owner: o\n')
    with pytest.raises(ConfigError, match=r"agents\.a\.system_prompt holds a NUL"):
        load(path)
    path.write_text('agents:\n  a:\n    system_prompt: "You help."\n    owner: o\n')
    assert load(path).agents["a"].system_prompt == "You help."
