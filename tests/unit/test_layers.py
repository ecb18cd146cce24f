"""The direction of imports (README.md, "Architecture"): the layers contract in pyproject.toml, checked by
import-linter as `make lint` runs it. The tree keeps it, and the contract is no formality: in a copy of
the tree, an import that runs up (the engine <-> agents circle this house once had, the run core reaching
into intake, storage reaching up, the console into the entries that mount it, a job into the CLI) or
across one line (leader and jobs), and a module placed on no line, each break it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the `ticketiq` found first on PYTHONPATH=`src`, with the repository's contract."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def copy_of_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "ticketiq", src / "ticketiq", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    done = lint_imports(ROOT / "src", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 1 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "imported"),
    [
        ("agents/catalog.py", "ticketiq.engine.seal"),  # the circle engine <-> agents of before issue 17
        ("engine/driver.py", "ticketiq.intake.scheduler"),  # the run core into the services
        ("storage/rows.py", "ticketiq.engine.state"),
        ("values/storable.py", "ticketiq.storage.rows"),
        ("console/ops_pages.py", "ticketiq.entries.jobs"),  # the console into the API that mounts it
        ("jobs/queue.py", "ticketiq.cli_client"),
        ("leader/sweep.py", "ticketiq.jobs.queue"),  # siblings on one line
    ],
)
def test_an_arrow_the_wrong_way_breaks_the_contract(tmp_path: Path, module: str, imported: str) -> None:
    src = copy_of_tree(tmp_path)
    with (src / "ticketiq" / module).open("a") as file:
        file.write(f"\nimport {imported}  # the wrong way\n")
    done = lint_imports(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    importer, target = "ticketiq." + module.split("/")[0], ".".join(imported.split(".")[:2])
    assert f"{importer} is not allowed to import {target}" in done.stdout, done.stdout
    assert "Contracts: 0 kept, 1 broken." in done.stdout


def test_a_module_on_no_layer_breaks_the_contract(tmp_path: Path) -> None:
    src = copy_of_tree(tmp_path)
    (src / "ticketiq" / "annex.py").write_text('"""A room nobody placed."""\n')
    done = lint_imports(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ticketiq.annex" in done.stdout, done.stdout
