"""The shape of the house (docs/architecture.md, "The map of the code"): the layers and no-circle contracts in
pyproject.toml, checked by import-linter as `make lint` runs it, and the rooms' sizes the map promises.
The contracts are no formality: in a copy of the tree, an import that runs up (the engine <-> agents
circle this house once had, the run core reaching into intake or into the read side above it, storage
reaching up into the servers, the console into the entries that mount it, a job into the CLI) or across
one line (leader and jobs), a module placed on no line, and a circle made only of TYPE_CHECKING imports
each break them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ticketiq"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# What starts or signals a process: none of it belongs in storage (rows and SQL), only in dbserver.
PROCESS_MODULES = {"subprocess", "signal", "multiprocessing", "psutil", "pty"}


def lint_imports(src: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the `ticketiq` found first on PYTHONPATH=`src`, with the repository's contract."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [str(LINT_IMPORTS), str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def copy_of_tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "ticketiq", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def modules_in(room: Path) -> list[str]:
    return sorted(p.name for p in room.glob("*.py"))


def test_the_tree_keeps_its_layers_and_has_no_circle(tmp_path: Path) -> None:
    done = lint_imports(ROOT / "src", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ticketiq's layers: a package imports only those below it KEPT" in done.stdout
    assert "ticketiq has no import circle KEPT" in done.stdout
    assert "Contracts: 2 kept, 0 broken." in done.stdout


WRONG_WAYS = [
    ("agents/catalog.py", "ticketiq.engine.seal"),  # the circle engine <-> agents of before issue 17
    ("engine/driver.py", "ticketiq.intake.scheduler"),  # the run core into the services
    ("engine/engine.py", "ticketiq.views.timeline_feed"),  # the run core into the read side above it
    ("storage/database.py", "ticketiq.dbserver.embedded"),  # rows and SQL into the servers
    ("storage/rows.py", "ticketiq.engine.state"),
    ("values/storable.py", "ticketiq.storage.rows"),
    ("console/ops_pages.py", "ticketiq.entries.jobs"),  # the console into the API that mounts it
    ("jobs/queue.py", "ticketiq.cli.client"),
    ("leader/sweep.py", "ticketiq.jobs.queue"),  # siblings on one line
    ("views/runs.py", "ticketiq.intake.scheduler"),  # siblings on one line
]


def test_each_arrow_the_wrong_way_breaks_the_layers(tmp_path: Path) -> None:
    """Every wrong arrow in one copy of the tree: each is reported on its own."""
    src = copy_of_tree(tmp_path)
    for module, imported in WRONG_WAYS:
        with (src / "ticketiq" / module).open("a") as file:
            file.write(f"\nimport {imported}  # the wrong way\n")
    done = lint_imports(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    for module, imported in WRONG_WAYS:
        importer, target = "ticketiq." + module.split("/")[0], ".".join(imported.split(".")[:2])
        assert f"{importer} is not allowed to import {target}" in done.stdout, (module, done.stdout)
    assert "ticketiq's layers: a package imports only those below it BROKEN" in done.stdout


def test_a_module_on_no_layer_breaks_the_contract(tmp_path: Path) -> None:
    src = copy_of_tree(tmp_path)
    (src / "ticketiq" / "annex.py").write_text('"""A room nobody placed."""\n')
    done = lint_imports(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ticketiq.annex" in done.stdout, done.stdout


def test_a_circle_of_typing_imports_breaks_the_no_circle_contract(tmp_path: Path) -> None:
    """The circle engine.py <-> timeline_feed.py this house had was half TYPE_CHECKING: that counts."""
    src = copy_of_tree(tmp_path)
    with (src / "ticketiq" / "engine" / "seal.py").open("a") as file:
        file.write("\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n")
        file.write("    from ticketiq.engine.driver import RunDriver\n")
    done = lint_imports(src, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ticketiq has no import circle BROKEN" in done.stdout
    assert "No cycles are allowed in ticketiq.engine." in done.stdout, done.stdout
    assert "- .seal -> .driver (1 import)" in done.stdout, done.stdout
    assert "ticketiq's layers: a package imports only those below it KEPT" in done.stdout


def test_the_rooms_keep_the_sizes_the_map_promises() -> None:
    root = modules_in(PACKAGE)
    assert len(root) <= 8, root
    engine = modules_in(PACKAGE / "engine")
    assert len(engine) <= 20, engine
    for room in [p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]:
        told = (room / "__init__.py").read_text()
        assert told.startswith('"""') and "May import" in told, f"{room.name}/__init__.py says what it may import"


def test_storage_starts_and_signals_no_process() -> None:
    graph = grimp.build_graph("ticketiq", include_external_packages=True, cache_dir=None)
    storage = {m for m in graph.modules if m == "ticketiq.storage" or m.startswith("ticketiq.storage.")}
    reached = {(m, i) for m in storage for i in graph.find_modules_directly_imported_by(m) if i in PROCESS_MODULES}
    assert not reached, reached
    # `os.kill`, `os.killpg` and `os.fork` come with `os`, which storage needs: looked for by name.
    for path in (PACKAGE / "storage").rglob("*.py"):
        text = path.read_text()
        assert not any(f"os.{call}(" in text for call in ("kill", "killpg", "fork", "execv", "spawnv")), path
