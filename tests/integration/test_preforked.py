"""The tests' fork server starts `ticketiq` children as a new interpreter would, including a PYTHONPATH of
the child's own with a `sitecustomize` on it (tests/support/job_kinds.py gives `ticketiq serve` the test
job kinds so), and falls back to a new interpreter for what a fork cannot give."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import preforked


def _custom(folder: Path) -> dict[str, str]:
    folder.mkdir()
    marker = folder / "ran"
    (folder / "sitecustomize.py").write_text(
        "import os, sys\n"
        f"open({str(marker)!r}, 'w').write(str(os.getpid()) + ' ' + sys.path[1])\n"
    )  # fmt: skip
    inherited = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(folder), inherited) if p)}


def test_a_child_with_a_pythonpath_of_its_own_is_forked_and_runs_its_sitecustomize_first(tmp_path: Path) -> None:
    env = _custom(tmp_path / "site")
    child = preforked.popen([sys.executable, "-m", "ticketiq.cli", "--help"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert isinstance(child, preforked.Forked)  # no new interpreter: forked from the server
    assert child.wait(60) == 0
    assert child.stdout is not None
    assert b"serve" in child.stdout.read()
    child.stdout.close()
    pid, first = (tmp_path / "site" / "ran").read_text().split(" ")
    assert int(pid) == child.pid  # run in the child itself, before the CLI
    assert first == str(tmp_path / "site")  # its folder first on the path, after the start folder


def test_a_child_whose_interpreter_would_start_otherwise_is_a_new_interpreter(tmp_path: Path) -> None:
    env = {**_custom(tmp_path / "site"), "PYTHONHASHSEED": "7"}
    child = preforked.popen([sys.executable, "-m", "ticketiq.cli", "--help"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    assert not isinstance(child, preforked.Forked)
    assert child.wait(60) == 0
    assert (tmp_path / "site" / "ran").exists()  # Python's own start ran it
