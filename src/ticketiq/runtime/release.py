"""Which release this process runs: the package's version and the commit it was built from. Shown by
`/readyz`, `GET /v1/processes` and the console, so an operator sees which processes a roll has replaced
and which versions serve side by side.

The commit is TICKETIQ_COMMIT when the build set it (the container image passes it as a build argument),
else read from the git checkout the package runs from (an editable install, `make demo`), else unknown.
Read from the files, not by running git: every process reads it once at its start."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

UNKNOWN = "unknown"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str

    def view(self) -> dict[str, str]:
        return {"version": self.version, "commit": self.commit}


@functools.cache
def current() -> Release:
    try:
        version = metadata.version("ticketiq")
    except metadata.PackageNotFoundError:
        version = UNKNOWN
    commit = os.environ.get("TICKETIQ_COMMIT", "").strip() or checkout_commit(Path(__file__).resolve()) or UNKNOWN
    return Release(version, commit[:12])


def checkout_commit(start: Path) -> str | None:
    """The commit HEAD names in the git checkout holding `start`, or None outside one."""
    for folder in start.parents:
        git = folder / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            text = git.read_text().strip()
            if not text.startswith("gitdir:"):
                return None
            git = (folder / text.removeprefix("gitdir:").strip()).resolve()
        if git.is_dir():
            return head_commit(git)
    return None


def head_commit(git: Path) -> str | None:
    """Pure but for reading files: HEAD's commit, through its ref (loose, or in packed-refs)."""
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    if not head.startswith("ref:"):
        return head or None  # a detached HEAD holds the commit itself
    ref = head.removeprefix("ref:").strip()
    common = _common_dir(git)
    for base in (git, common):
        try:
            return (base / ref).read_text().strip() or None
        except OSError:
            continue
    try:
        packed = (common / "packed-refs").read_text()
    except OSError:
        return None
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name == ref:
            return sha
    return None


def _common_dir(git: Path) -> Path:
    """A worktree's git folder keeps its refs in the main one (`commondir`)."""
    try:
        return (git / (git / "commondir").read_text().strip()).resolve()
    except OSError:
        return git
