"""An earlier commit of this repository, installed to run beside today's: a git worktree of it and a venv
of its own holding its package, kept between runs of a bench so a side by side pays the install once.

    found = prepare(REPO, "d7c25d5")
    subprocess.run([str(found.python), "-m", "ticketiq.cli", "serve"], env=found.env(os.environ))

Made as tests/previous_release/test_side_by_side.py makes the previous release's: the package installed
(not editable) from the worktree, as a deploy installs it, its own code and the files it ships; the
libraries are the running venv's, reached by a `.pth` line holding a plain path (not a site directory, so
today's editable install there is not read). Both sides then run the same library versions, and what a
side by side measures is the code. The worktree and venv live under `cache`, one folder a commit
(`<tempdir>/ticketiq-bench-<uid>/<commit>`: outside the repository, so no tool of it reads them), and
are reused while they hold that commit; `git worktree list` shows the worktree until `git worktree
remove` (or the folder's removal and `git worktree prune`) takes it away.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(tempfile.gettempdir()) / f"ticketiq-bench-{os.getuid()}"
STAMP = "installed"  # written last, holding the commit: a folder without it is a half-made one


@dataclass(frozen=True)
class Baseline:
    rev: str  # as asked for: "d7c25d5"
    commit: str  # the full hash it names
    tree: Path
    python: Path

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` for a process of this commit: no PYTHONPATH, which could put today's package first."""
        return {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.rstrip()  # not lstrip: `status --porcelain` lines begin with a space


def prepare(repo: Path, rev: str, cache: Path = CACHE) -> Baseline:
    """The worktree and venv of `rev`, reused when they hold it, made otherwise."""
    commit = git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    home = cache / commit
    found = Baseline(rev, commit, home / "tree", home / "venv" / "bin" / "python")
    if _kept(found, home):
        return found
    print(f"baseline: a worktree of {rev} ({commit[:12]}) and its venv, in {home}", flush=True)
    if home.exists():
        shutil.rmtree(home)
    git(repo, "worktree", "prune")  # a worktree whose folder was removed is still registered until then
    home.mkdir(parents=True)
    git(repo, "worktree", "add", "--detach", str(found.tree), commit)
    venv = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    own = _purelib(found.python)
    (Path(own) / "shared-libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(found.python), "install", "--quiet", "--no-deps",
                    "--no-compile", str(found.tree)], check=True, timeout=600)  # fmt: skip
    where = _package_file(found)
    if not where.startswith(own):
        raise SystemExit(f"the baseline's venv imports ticketiq from {where}, not from its own {own}")
    (home / STAMP).write_text(commit + "\n")
    return found


def _kept(found: Baseline, home: Path) -> bool:
    stamp = home / STAMP
    if not stamp.exists() or stamp.read_text().strip() != found.commit or not found.python.exists():
        return False
    if not (found.tree / ".git").exists():
        return False
    return git(found.tree, "rev-parse", "HEAD") == found.commit and _package_file(found).startswith(
        _purelib(found.python)
    )


def _purelib(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()  # fmt: skip


def _package_file(found: Baseline) -> str:
    done = subprocess.run([str(found.python), "-c", "import ticketiq; print(ticketiq.__file__)"],
                          env=found.env(os.environ), capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else ""
