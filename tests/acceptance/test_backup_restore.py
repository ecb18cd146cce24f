"""Issue 34, part 8 (I24): a backup taken while runs go on, restored into a new home, never doubles a write.

Real `ticketiq serve` processes on the embedded server of a home, the stand-ins keeping their records in the
suite's Postgres (the vendors' world, which no restore rewinds). Three triage runs and a writer are in flight
when `ticketiq db backup` is taken: the triage runs between steps, the writer waiting for its three calls to be
approved. They all finish on the first home. The processes stop; `ticketiq db restore` puts the backup into a
new home, and processes start on it. Every restored triage run ends, succeeded, and the stand-ins hold each
incident, Jira comment and Teams reply once: the re-planned writes carry the step keys the lost steps used, so
the incident is deduped by its key and the comment and the reply are read back and found. The writer's calls,
approved again, are settled the same way: its Discord message, SQS message and webhook, which nothing can read
back nor (past a few minutes, or ever) dedupe, wait for an operator, each with the reason, until `ticketiq runs
resume` sends them once more under their keys (the operator's risk: the webhook lands a second time; Discord's
and SQS's few minutes dedupe theirs here). `db restore` refuses a home that is not empty, and changes nothing.

Every wait has a generous deadline and nothing is timed: the machine is shared.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.acceptance.test_embedded_restart import TRIAGE, each_write_once, run_of, wait_for
from tests.support import preforked
from tests.support.cluster import Cluster
from tests.support.http import web
from ticketiq.dbserver import embedded
from ticketiq.settings import Settings

MODEL_LATENCY_MS = 2500  # triage's four steps span some 10 s: the backup lands while every run goes
TICKETS = [1601, 1602, 1603]
WRITER = "Announce OPS-1650: checkout is failing"
HELD = ["discord_send_message", "sqs_send_message", "webhook_post"]  # the writer's calls wait for approval
VENDOR_OF = {"discord_send_message": "discord", "sqs_send_message": "sqs", "webhook_post": "webhook"}


def cli(home: Path, *args: str) -> Any:
    """The real CLI on `home` (its embedded server; no TICKETIQ_DATABASE_URL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env={**env, "TICKETIQ_HOME": str(home)},
                         timeout=180)  # fmt: skip


@dataclass
class World:
    tmp: Path
    first: Cluster  # the processes on the home the backup is taken of
    clusters: list[Cluster] = field(default_factory=list)
    homes: list[Path] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.tmp / "home"  # the home Cluster gives every process it starts


@pytest.fixture
def world(db_url: str) -> Iterator[World]:
    """The first home's server, started by `ticketiq db url`, with the stand-ins on the suite's database. All
    started is stopped at the end, even on failure. Outside pytest's temporary root (see test_embedded_restart)."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-restore-") as folder:
        tmp = Path(folder)
        made = World(tmp, Cluster("", tmp))
        made.homes.append(made.home)
        try:
            url = cli(made.home, "db", "url")
            assert url.returncode == 0, url.stderr
            first = Cluster(url.stdout.strip(), tmp, standin_args=("--model-latency-ms", str(MODEL_LATENCY_MS)),
                            standins_db_url=db_url)  # fmt: skip
            made.first = first
            made.clusters.append(first)
            first.start()
            yield made
        finally:
            for cluster in reversed(made.clusters):  # the stand-ins (the first's) stop last
                cluster.stop()
            for home in made.homes:
                embedded.stop(home)


def agents_file(tmp: Path) -> Path:
    """The sample agents, with the writer's three writes held for approval: it waits at a step boundary."""
    spec = yaml.safe_load(Path(Settings().agents).read_text())
    spec["approval_required"] = [*spec.get("approval_required", []), *HELD]
    path = tmp / "agents.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def approve_pending(cluster: Cluster, base: str, run_id: str) -> int:
    listed = web.get(f"{base}/v1/approvals", params={"status": "pending"}, headers=cluster.auth, timeout=30)
    listed.raise_for_status()
    pending = [a for a in listed.json()["approvals"] if a["run_id"] == run_id]
    for approval in pending:
        decided = web.post(f"{base}/v1/approvals/{approval['id']}", json={"decision": "approve"},
                           headers=cluster.auth, timeout=30)  # fmt: skip
        assert decided.status_code == 200, decided.text
    return len(pending)


def applied(cluster: Cluster, vendor: str) -> list[dict[str, Any]]:
    return [w for w in cluster.writes(vendor=vendor) if w["effect"] == "applied"]


def test_a_backup_restored_into_a_new_home_ends_every_run_and_doubles_no_write(world: World) -> None:
    a = world.first
    agents = agents_file(world.tmp)
    first, second = a.app("first", lead=True, agents=agents), a.app("second", lead=True, agents=agents)
    runs = {n: a.post_run(first if n % 2 else second, "triage", TRIAGE.format(n=n)) for n in TICKETS}
    writer = a.post_run(first, "writer", WRITER)
    wait_for(lambda: all(a.run(r)["step"] >= 1 for r in runs.values()) and a.run(writer)["status"] == "waiting",
             "every triage run's first step and the writer waiting", a)  # fmt: skip

    # The backup, online: the processes go on meanwhile.
    backup = world.tmp / "ticketiq.dump"
    taken = cli(world.home, "db", "backup", str(backup))
    assert taken.returncode == 0 and taken.stdout.strip() == str(backup), taken.stderr

    # On the first home everything finishes: the writer's calls approved and sent, every triage run done.
    assert approve_pending(a, first.base, writer) == 3
    for run_id in [*runs.values(), writer]:
        assert a.wait_run(run_id, timeout_s=180)["status"] == "succeeded", a.logs()
    each_write_once(a, TICKETS)
    for vendor in ("discord", "sqs", "webhook"):
        assert len(applied(a, vendor)) == 1, vendor
    for app in a.apps:
        app.child.stop()

    # Restored into a new home; a home that is not empty is refused, nothing changed.
    home_b = world.tmp / "restored"
    world.homes.append(home_b)
    restored = cli(home_b, "db", "restore", str(backup))
    assert restored.returncode == 0, restored.stderr
    assert "4 runs had not ended at the backup's point" in restored.stdout, restored.stdout
    refused = cli(world.home, "db", "restore", str(backup))
    assert refused.returncode == 2 and "is not empty" in refused.stderr and "nothing was changed" in refused.stderr
    url = cli(home_b, "db", "url")
    assert url.returncode == 0, url.stderr
    (world.tmp / "b").mkdir()
    # The same stand-ins (the vendors remember), and the same token: the restore brought its row back.
    b = Cluster(url.stdout.strip(), world.tmp / "b", standins_base=a.standin_url, token=a.token)
    b.env = {**a.env, "TICKETIQ_HOME": str(home_b), "TICKETIQ_DATABASE_URL": b.db_url}
    world.clusters.append(b)
    marked = {
        r["id"]: r for r in b.rows("SELECT id::text, status, restored_from FROM runs WHERE restored_at IS NOT NULL")
    }
    assert set(marked) == {*runs.values(), writer}
    assert all(r["restored_from"].startswith("ticketiq.dump, taken ") for r in marked.values())
    at_backup = {r["id"]: r["step"] for r in b.rows("SELECT run_id::text AS id, step FROM checkpoints")}
    assert all(at_backup[r] < 3 for r in runs.values()), at_backup  # each had writes still to make at the backup

    # Processes on the restored home: every triage run ends, and every write is still held once.
    one, two = b.app("one", lead=True, agents=agents), b.app("two", lead=True, agents=agents)
    for run_id in runs.values():
        assert b.wait_run(run_id, timeout_s=180)["status"] == "succeeded", b.logs()
    each_write_once(b, TICKETS)
    settled = [
        r["detail"] for r in b.rows("SELECT detail FROM audit_log WHERE action = 'agent.call.settled_after_restore'")
    ]
    assert {(d["tool"], d["happened"]) for d in settled} >= {("jira_add_comment", "found"), ("teams_reply", "found")}

    # The writer, approved again: its three writes, which no one can settle (no reader; a dedupe of minutes, or
    # none), wait for an operator, each with the reason, until `ticketiq runs resume` sends them. Each decision
    # wakes the run, so a write whose decision came while the run went on is held at its next wake-up: the
    # operator may be asked more than once, each held write once, and nothing goes out before.
    wait_for(lambda: (run_of(one, b, writer) or {}).get("status") == "waiting", "the restored writer waiting", b)
    assert approve_pending(b, one.base, writer) == 3

    def held() -> list[dict[str, Any]]:
        waits = (run_of(one, b, writer) or {}).get("waiting_for_all") or []
        return [w for w in waits if "restored from a backup" in w["question"]]

    asked: list[str] = []
    resumes = 0
    for _ in HELD:
        wait_for(lambda: b.run(writer)["status"] == "succeeded" or bool(held()),
                 "the writer ending or waiting for an operator", b)  # fmt: skip
        waits = held()
        if not waits:
            break
        assert all("resume the run" in w["question"] and "no reader" in w["question"] for w in waits), waits
        for w in waits:
            assert len(applied(b, VENDOR_OF[w["tool"]])) == 1, w  # held: not sent again yet
        asked += [w["tool"] for w in waits]
        resumed = cli(home_b, "runs", "resume", writer, "--url", two.base, "--token", b.token)
        assert resumed.returncode == 0 and "resumed" in resumed.stdout, resumed.stderr
        resumes += 1
    assert sorted(asked) == sorted(HELD)  # each held once
    assert b.wait_run(writer, timeout_s=180)["status"] == "succeeded", b.logs()
    assert len(applied(b, "discord")) == 1  # sent again with its nonce, within Discord's minutes: deduped
    assert len(applied(b, "sqs")) == 1  # sent again under its key, within SQS's five minutes: deduped
    assert len(applied(b, "webhook")) == 2  # the operator's word: sent again, the risk theirs
    audit = b.rows("SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.resumed_by_operator'", writer)
    assert [r["actor"] for r in audit] == ["cluster-admin"] * resumes  # one audit row a resume


def test_db_restore_refuses_what_is_not_a_backup_and_leaves_the_home_empty() -> None:
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-restore-") as folder:
        home = Path(folder) / "home"
        try:
            missing = cli(home, "db", "restore", str(Path(folder) / "none.dump"))
            assert missing.returncode == 2 and "no backup file" in missing.stderr, missing.stderr
            garbage = Path(folder) / "garbage.dump"
            garbage.write_bytes(b"PGDMP, or so it says")
            refused = cli(home, "db", "restore", str(garbage))
            assert refused.returncode == 2 and "is not a backup" in refused.stderr, refused.stderr
            # Nothing half written: the home's database has no table, so a real restore would still go in.
            check = cli(home, "db", "migrate", "--check")
            assert "a new database: no release ran on it before" in check.stdout, check.stdout
        finally:
            embedded.stop(home)
