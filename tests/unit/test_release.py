"""Which release a process runs (runtime/release.py): the commit read from a git checkout's files, as git
itself names HEAD: through a loose ref, packed-refs, a detached HEAD, or a worktree's git file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ticketiq.runtime.release import checkout_commit, current, head_commit

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "one")
    (path / "pkg").mkdir()
    return path


def test_the_commit_is_read_through_a_loose_ref_packed_refs_and_a_detached_head(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert checkout_commit(repo / "pkg" / "module.py") == head
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert head_commit(repo / ".git") == head
    git(repo, "checkout", "-q", "--detach")
    assert head_commit(repo / ".git") == head


def test_a_worktree_names_its_own_head(repo: Path, tmp_path: Path) -> None:
    git(repo, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "two")
    first = git(repo, "rev-parse", "HEAD~1")
    git(repo, "worktree", "add", "-q", "-b", "old", str(tmp_path / "wt"), first)
    assert checkout_commit(tmp_path / "wt" / "x.py") == first
    assert checkout_commit(repo / "x.py") == git(repo, "rev-parse", "HEAD")


def test_outside_a_checkout_there_is_no_commit(tmp_path: Path) -> None:
    assert checkout_commit(tmp_path / "a" / "b.py") is None


def test_this_process_runs_this_checkouts_commit_unless_the_build_named_one() -> None:
    assert current().commit == git(ROOT, "rev-parse", "HEAD")[:12]
    named = subprocess.run(
        [sys.executable, "-c", "from ticketiq.runtime.release import current; print(current().commit)"],
        env={**os.environ, "TICKETIQ_COMMIT": "0123456789abcdef0123"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert named.stdout.strip() == "0123456789ab"
