"""A kill trial's logs with TICKETIQ_LOG_FORMAT=json for every process (issue 36, part 2): one round of the
kill trials (tests/unit/test_kill_trials.py's harness: a survivor and a victim behind HAProxy, a cron fire,
a Teams turn, a signed webhook delivery and an MCP run begun on the victim, the victim SIGKILLed while it
drives them). Every line an app process or the stand-ins wrote is one JSON object, even the victim's last;
the records made while the survivor drove the runs it took over name the run, the new attempt and the
survivor; and no log file of the trial, HAProxy's included, holds a seal key, a bearer token or any other
secret the processes had."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import BASE_SETTINGS, Cluster
from tests.support.http import web
from tests.support.trial_entries import SECRET as TRIGGER_SECRET
from tests.support.trial_rig import MODEL_LATENCY_MS, Rig
from tests.support.trials import DEFAULT_MIX
from ticketiq.dbserver.authentication import password_of
from ticketiq.settings import Settings

# A value of any of these shapes is a credential whoever made it: our API tokens, and JWTs (the Bot Framework
# tokens the Teams turn was signed with and the bot bought its replies with).
CREDENTIAL_SHAPES = (re.compile(r"tiq_[A-Za-z0-9_-]{16,}"), re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\."))
OURS = ("survivor.log", "victim0.log", "standins.log")  # the logs our processes wrote; edge/edge.log is HAProxy's


class KillWhileDriving(random.Random):
    """The rig's draw of the kill's instant (`Rig._strike` sleeps until `up + uniform(...)`), answered by
    waiting until the victim drives two runs past their first step: this one round must catch runs in
    flight, on a loaded machine too, where a drawn instant may come before they began or after they ended."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(0)
        self.cluster = cluster
        self.survivor = ""  # its identity, known once the rig started it

    def uniform(self, a: float, b: float) -> float:
        query = """SELECT count(*) AS n FROM leases l JOIN checkpoints c ON l.name = 'checkpoint:' || c.run_id
                    WHERE l.holder <> %s AND l.expires_at > now() AND c.step >= 1"""
        self.cluster.wait_until(lambda: self.cluster.rows(query, self.survivor)[0]["n"] >= 2, 30,
                                "the victim driving two runs past their first step")  # fmt: skip
        return 0.0  # now


def json_lines(path: Path) -> list[dict[str, Any]]:
    records = []
    for no, line in enumerate(path.read_text().splitlines(), 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"{path.name}:{no} is not one JSON object: {line[:300]!r}")
        assert isinstance(records[-1], dict), f"{path.name}:{no}: {line[:300]!r}"
    return records


@pytest.mark.long
def test_a_kill_trial_s_logs_are_json_lines_naming_runs_and_hold_no_secret(db_url: str, tmp_path: Path) -> None:
    cluster = Cluster(db_url, tmp_path, standin_args=("--model-latency-ms", str(MODEL_LATENCY_MS)),
                      every_process={"TICKETIQ_LOG_FORMAT": "json"})  # fmt: skip
    try:
        cluster.start()
        when = KillWhileDriving(cluster)
        rig = Rig(cluster, "kill", when, None, DEFAULT_MIX)
        try:
            rig.start()
            assert rig.survivor is not None
            when.survivor = str(web.get(f"{rig.survivor.base}/readyz", timeout=10).json()["process"])
            played = rig.play(0)
        finally:
            rig.stop()
        taken_over = [r["id"] for r in cluster.rows(
            "SELECT r.id::text AS id FROM runs r JOIN checkpoints c ON c.run_id = r.id WHERE c.losses > 0"
        )]  # fmt: skip
        attempts = cluster.rows("SELECT run_id::text AS run_id, attempt, process FROM run_attempts")
    finally:
        cluster.stop()
    assert not [v for v in played.verdicts if v.failed] and not played.problems, (played.verdicts, played.problems)
    assert taken_over, "the kill caught no run in flight: the trial tests nothing"

    logs = {name: json_lines(tmp_path / name) for name in OURS}
    # The stand-ins say something only when a request fails them (the victim killed mid-request): maybe nothing.
    assert logs["survivor.log"] and logs["victim0.log"], {name: len(records) for name, records in logs.items()}
    for run_id in taken_over:
        resumed = [r for r in logs["survivor.log"] if r.get("run_id") == run_id]
        assert resumed, f"no record of the survivor names run {run_id}"
        assert all(r["attempt"] >= 2 and r["process"] == when.survivor for r in resumed), resumed
        drove = {(a["attempt"], a["process"]) for a in attempts if a["run_id"] == run_id}
        assert all((r["attempt"], r["process"]) in drove for r in resumed), (resumed, drove)

    secrets = {
        "crash-test-secret", BASE_SETTINGS["TICKETIQ_SEAL_KEYS"], cluster.token, TRIGGER_SECRET,
        *Settings.from_env(cluster.env).secrets(),
    }  # fmt: skip
    password = password_of(db_url)
    if password:
        secrets.add(password)
    assert cluster.token.startswith("tiq_") and "crash-test-secret" in Settings.from_env(cluster.env).secrets()
    written = sorted(tmp_path.rglob("*.log"))
    assert {p.name for p in written} >= {*OURS, "edge.log"}, written
    for path in written:
        text = path.read_text(errors="replace")
        # Where, never what: a failure's message is itself kept (CI's output).
        held = sum(s in text for s in secrets)
        assert not held, f"{path.name} holds {held} of the trial's {len(secrets)} secrets"
        shaped = [m.start() for shape in CREDENTIAL_SHAPES for m in shape.finditer(text)]
        assert not shaped, f"{path.name} holds credentials at offsets {shaped}"
