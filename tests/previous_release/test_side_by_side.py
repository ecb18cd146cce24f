"""The previous release (commit d7c25d5) and today's side by side on one database, as during a roll: a
process of each serves, runs are started on both, and each in turn is SIGKILLed with runs in flight.
The other release's process takes the runs over and finishes them, each write once.

That release's process runs from a venv of its own, into which the package is installed (not editable)
from a git worktree of the commit, as a deploy of that release installs it: its own code and the files it
ships (migrations, queries, templates). The libraries are this venv's, reached by a `.pth` line: that
release pins the same dependencies as this one (`test_the_previous_release_pins_todays_dependencies`),
and installing them again would cost a minute on every fresh clone. Started as a fresh interpreter, never
from the suite's fork server, which holds today's code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.previous_release.make_fixture import RELEASE
from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.operate.launch import Child, free_port

REPO = Path(__file__).resolve().parents[2]
TRIAGE = "Triage OPS-{n}: checkout is failing"
MODEL_LATENCY_MS = 700  # a triage run spans some 3 s: the kill lands while runs are going


def dependencies(pyproject: str) -> set[str]:
    """The `[project] dependencies` of a pyproject.toml, one requirement each (comments left out)."""
    start = pyproject.index("dependencies = [")
    listed = pyproject[start : pyproject.index("\n]", start)].splitlines()[1:]
    return {line.split("#")[0].strip().rstrip(",") for line in listed if line.strip().startswith('"')}


def test_the_previous_release_pins_todays_dependencies() -> None:
    """What lets the previous release's venv share this one's libraries (`previous_python`): each of its
    requirements is one of today's, as written. Today may need more (a library it never imports)."""
    shown = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{RELEASE}:pyproject.toml"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        pytest.skip(f"this clone does not hold commit {RELEASE} (a shallow clone): `git fetch --unshallow`")
    previous, today = dependencies(shown.stdout), dependencies((REPO / "pyproject.toml").read_text())
    assert len(previous) > 10  # read as a list of requirements, not an empty match
    assert previous <= today, f"the previous release's requirements today's do not hold: {sorted(previous - today)}"


@pytest.fixture(scope="module")
def previous_python() -> Iterator[Path]:
    """The interpreter of a venv holding the previous release's package, installed from a worktree of its
    commit; the worktree and the venv removed at the end."""
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{RELEASE}^{{commit}}"], capture_output=True)
    if known.returncode != 0:
        pytest.skip(f"this clone does not hold commit {RELEASE} (a shallow clone): `git fetch --unshallow`")
    with tempfile.TemporaryDirectory(prefix="ticketiq-previous-") as folder:
        tree = Path(folder) / RELEASE
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), RELEASE], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        try:
            venv = Path(folder) / "venv"
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
            python = venv / "bin" / "python"
            own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
            shared = sysconfig.get_paths()["purelib"]
            # A plain path, not a site directory: the .pth files there (today's editable install) are not read.
            (Path(own) / "shared-libraries.pth").write_text(shared + "\n")
            subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                            "--no-compile", str(tree)], check=True, capture_output=True, timeout=300)  # fmt: skip
            found = subprocess.run([str(python), "-c", "import ticketiq; print(ticketiq.__file__)"], check=True,
                                   capture_output=True, text=True).stdout  # fmt: skip
            assert found.startswith(own), found  # that release's package, not today's
            yield python
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], timeout=120)


def start_previous(cluster: Cluster, python: Path, name: str, **settings: str) -> App:
    """A `ticketiq serve` of the previous release, with the cluster's settings, tracked by the cluster."""
    port = free_port()
    env = dict(cluster.env)
    env.update({f"TICKETIQ_{k.upper()}": v for k, v in settings.items()})
    log_path = cluster.tmp / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([str(python), "-m", "ticketiq.cli", "serve", "--port", str(port)], env=env,
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    app = App(Child(name, proc, log_path, env), f"http://127.0.0.1:{port}")
    cluster.apps.append(app)
    cluster.wait_until(lambda: proc.poll() is not None or _ready(app), 60, f"{name} ready")
    assert proc.poll() is None, app.child.log_tail()
    return app


def _ready(app: App) -> bool:
    try:
        return web.get(f"{app.base}/readyz", timeout=5).status_code == 200
    except Exception:
        return False


def release_of(app: App) -> str:
    """What the process says of its release: today's name it in /readyz, the previous release does not."""
    shown = web.get(f"{app.base}/readyz", timeout=10).json()
    return "today" if "version" in shown else "previous"


def each_write_once(cluster: Cluster, tickets: list[int]) -> None:
    """Per ticket: one incident, one Jira comment, one Teams reply applied, whichever release made them."""
    writes = [w for w in cluster.writes() if w["effect"] == "applied"]
    for n in tickets:
        made = Counter(w["vendor"] for w in writes if f"OPS-{n}" in str(w))
        assert made == {"incidentio": 1, "jira": 1, "teams": 1}, (n, made)


def kill_with_runs_in_flight(cluster: Cluster, victim: App, other: App, tickets: list[int]) -> None:
    """Triage runs on both processes; the victim SIGKILLed once each took its first step: every run
    succeeds, each write once."""
    runs = {n: cluster.post_run(victim if n % 2 else other, "triage", TRIAGE.format(n=n)) for n in tickets}
    cluster.wait_until(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), 60, "every run's first step")
    os.kill(victim.pid, signal.SIGKILL)
    for n, run_id in runs.items():
        assert cluster.wait_run(run_id, 90)["status"] == "succeeded", (n, cluster.logs())
    each_write_once(cluster, tickets)


@pytest.mark.long
def test_the_previous_release_and_todays_take_over_each_others_runs_whichever_is_killed(
    make_cluster: Callable[..., Cluster], previous_python: Path
) -> None:
    cluster = make_cluster("--model-latency-ms", str(MODEL_LATENCY_MS))
    old = start_previous(cluster, previous_python, "previous-1", lead="true")
    new = cluster.app("today-1")
    assert (release_of(old), release_of(new)) == ("previous", "today")

    # The previous release's process dies with runs in flight on both: today's takes its runs over.
    kill_with_runs_in_flight(cluster, victim=old, other=new, tickets=list(range(4101, 4105)))
    # Today's process dies with runs in flight on both: a process of the previous release takes them over.
    old2 = start_previous(cluster, previous_python, "previous-2", lead="true")
    kill_with_runs_in_flight(cluster, victim=new, other=old2, tickets=list(range(4105, 4109)))
    assert old2.child.alive()
