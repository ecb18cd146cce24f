"""The files under deploy/ that a user copies (the container image, the systemd unit, the Kubernetes
manifests) read as their tools read them, and held to the settings: the readiness path the API answers,
the hand-over's grace inside the stop timeout, a rollout that never takes a ready process away first.
The image's build copies what the package needs: its wheel is built here from exactly those files."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from ticketiq.entries.auth import OPEN_PATHS
from ticketiq.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GRACE_S = Settings().shutdown_grace_s
# uvicorn's own graceful shutdown, as `ticketiq serve` sets it (cli/main.py): the grace and a second.
SERVE_STOP_S = int(GRACE_S) + 1


def dockerfile() -> list[tuple[str, str]]:
    """Instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    joined, out = "", []
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        joined += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = joined.partition(" ")
            out.append((word.upper(), rest.strip()))
            joined = ""
    return out


def unit() -> dict[str, list[tuple[str, str]]]:
    """The systemd unit's sections, each a list of (key, value): a key may repeat (Environment=)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for raw in (DEPLOY / "systemd" / "ticketiq@.service").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = []
            continue
        key, _, value = line.partition("=")
        sections[current].append((key, value))
    return sections


def manifests() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            found[doc["kind"]] = doc
    return found


def test_the_image_installs_the_package_and_serves_it_on_its_port_with_the_settings_grace() -> None:
    steps = dockerfile()
    words = {k: [a for kk, a in steps if kk == k] for k, _ in steps}
    assert words["FROM"] == ["python:3.11-slim"]  # the Python the package requires (pyproject: >=3.11)
    copied = " ".join(words["COPY"])
    assert "pyproject.toml" in copied and "README.md" in copied and "src" in copied
    assert any(shlex.split(run)[:4] == ["pip", "install", "--no-cache-dir", "."] for run in words["RUN"])
    assert words["STOPSIGNAL"] == ["SIGTERM"]
    entry = yaml.safe_load(words["ENTRYPOINT"][0])
    assert entry[:2] == ["ticketiq", "serve"] and entry[entry.index("--port") + 1] == words["EXPOSE"][0]
    assert "/readyz" in words["HEALTHCHECK"][0] and "/readyz" in OPEN_PATHS
    env = dict(pair.split("=", 1) for pair in shlex.split(words["ENV"][0]))
    assert float(env["TICKETIQ_SHUTDOWN_GRACE_S"]) == GRACE_S


def test_the_files_the_image_copies_build_the_package_make_demo_installs(tmp_path: Path) -> None:
    # What the image's build has (COPY pyproject.toml README.md, COPY src): nothing else of the repository.
    build = tmp_path / "src-copy"
    build.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, build / name)
    shutil.copytree(ROOT / "src", build / "src", ignore=shutil.ignore_patterns("__pycache__"))
    made = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), "."],
        cwd=build, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    [wheel] = tmp_path.glob("ticketiq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    # The package with what it reads at run time: migrations, queries, the sample agents, the console.
    for needed in ("ticketiq/cli/main.py", "ticketiq/storage/migrations/001_init.sql", "ticketiq/agents/sample.yaml"):
        assert needed in names, needed
    assert any(n.startswith("ticketiq/storage/queries/") and n.endswith(".sql") for n in names)
    assert any(n.startswith("ticketiq/console/") and n.endswith(".html") for n in names)


def test_the_unit_stops_with_sigterm_and_waits_longer_than_the_hand_over() -> None:
    sections = unit()
    service = sections["Service"]
    values = dict(service)
    assert values["KillSignal"] == "SIGTERM"
    assert "ticketiq serve" in values["ExecStart"] and "--port %i" in values["ExecStart"]
    env = dict(v.split("=", 1) for k, v in service if k == "Environment")
    assert float(env["TICKETIQ_SHUTDOWN_GRACE_S"]) == GRACE_S
    assert int(values["TimeoutStopSec"]) > SERVE_STOP_S
    starts = dict(sections["Unit"])
    assert (starts["StartLimitBurst"], starts["StartLimitIntervalSec"]) == ("5", "60")  # a crash loop: left down


def test_the_rollout_keeps_every_ready_process_until_its_successor_is_ready_and_drains_within_the_grace() -> None:
    found = manifests()
    deployment = found["Deployment"]
    spec = deployment["spec"]
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    [app] = pod["containers"]
    ready = app["readinessProbe"]["httpGet"]
    assert ready["path"] == "/readyz" and ready["path"] in OPEN_PATHS
    assert app["livenessProbe"]["httpGet"]["path"] in OPEN_PATHS
    env = {e["name"]: e for e in app["env"]}
    assert float(env["TICKETIQ_SHUTDOWN_GRACE_S"]["value"]) == GRACE_S
    assert {"TICKETIQ_DATABASE_URL", "TICKETIQ_SEAL_KEYS"} <= set(env)  # the same keys on every process
    pre_stop = app["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # The kubelet's SIGKILL comes after the preStop wait and the hand-over, never during them.
    assert pod["terminationGracePeriodSeconds"] > float(pre_stop[1]) + SERVE_STOP_S
    port_names = {p["name"] for p in app["ports"]}
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    budget = found["PodDisruptionBudget"]["spec"]
    assert budget["selector"]["matchLabels"] == labels and budget["minAvailable"] >= 1
    service = found["Service"]["spec"]
    assert service["selector"] == labels
    assert {p["targetPort"] for p in service["ports"]} <= port_names


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_reads_the_unit_without_complaint_but_the_binary_it_names(tmp_path: Path) -> None:
    copy = tmp_path / "ticketiq@.service"
    copy.write_text((DEPLOY / "systemd" / "ticketiq@.service").read_text())
    checked = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    complaints = [line for line in checked.stderr.splitlines() if line.strip() and "/opt/ticketiq/" not in line]
    assert complaints == [], checked.stderr
