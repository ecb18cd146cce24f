"""A configuration error at start is one line on stderr and exit 2, never a traceback (issue 33, part 5):
the real CLI as subprocesses, each refused before it starts anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "ticketiq.cli"]


def _env(tmp_path: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    return {**env, "TICKETIQ_HOME": str(tmp_path / "home"), **settings}


def _refused(args: list[str], env: dict[str, str]) -> str:
    """The one line a refused command printed; it exited 2 and said no more."""
    done = subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=60)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and lines[0].startswith("ticketiq: "), done.stderr
    assert done.stdout == "", done.stdout
    return lines[0]


@pytest.fixture
def bad_agents(tmp_path: Path) -> dict[str, Path]:
    files = {
        "unknown_tool": "agents:\n  a:\n    system_prompt: x\n    owner: me\n    tools: [jira_teleport]\n",
        "bad_yaml": "agents:\n  a: [\n",
    }
    paths = {}
    for name, text in files.items():
        paths[name] = tmp_path / f"{name}.yaml"
        paths[name].write_text(text)
    paths["missing"] = tmp_path / "nowhere.yaml"
    return paths


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["cluster", "--port", "0"], ["demo"]])
def test_a_broken_agents_file_is_one_line_and_exit_2(
    command: list[str], bad_agents: dict[str, Path], tmp_path: Path
) -> None:
    line = _refused(command, _env(tmp_path, TICKETIQ_AGENTS=str(bad_agents["unknown_tool"])))
    # What, where, what to do: the tool, the file and the agent, the tools there are.
    assert "jira_teleport" in line and str(bad_agents["unknown_tool"]) in line and "'a'" in line, line
    assert "known:" in line and "jira_get_issue" in line, line

    line = _refused(command, _env(tmp_path, TICKETIQ_AGENTS=str(bad_agents["bad_yaml"])))
    assert f"agents file {bad_agents['bad_yaml']} is not valid YAML at line 3" in line, line
    assert "fix it or set TICKETIQ_AGENTS" in line, line

    line = _refused(command, _env(tmp_path, TICKETIQ_AGENTS=str(bad_agents["missing"])))
    assert f"agents file {bad_agents['missing']} does not exist" in line and "set TICKETIQ_AGENTS" in line, line
    assert not (tmp_path / "home").exists()  # nothing was started, not even the embedded database


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    line = _refused(["serve", "--port", "0"], _env(tmp_path, TICKETIQ_DB_POOL_MAX="many"))
    assert "TICKETIQ_DB_POOL_MAX='many' is not valid" in line and "Fix or unset it" in line, line


def test_standins_refuse_a_missing_or_broken_scripts_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    line = _refused(["standins", "--port", "0", "--scripts", str(missing)], _env(tmp_path))
    assert f"stand-in scripts folder {missing} is not a folder" in line, line
    # The variable is read as the option is.
    line = _refused(["standins", "--port", "0"], _env(tmp_path, TICKETIQ_STANDIN_SCRIPTS=str(missing)))
    assert str(missing) in line, line
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "mine.yaml").write_text("steps:\n  - calls: []\n")
    line = _refused(["standins", "--port", "0", "--scripts", str(broken)], _env(tmp_path))
    assert "model script 'mine': step 1: `calls` must be a non-empty list" in line, line


def test_settings_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # The reader is gone before the first write, as `ticketiq settings | head -1` once head has its line.
    proc = subprocess.Popen([*CLI, "settings"], env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141, stderr
    assert stderr == "", stderr
