"""Kill trials, as the product page states them: two local app processes behind HAProxy over the test
suite's Postgres. Each round starts a fresh victim that begins a cron fire, a Teams turn from the
durable inbox and a signed webhook delivery (each a triage run for its own ticket) and a run of the
`noter` agent on the stand-ins' MCP server (`POST /v1/runs`: add_note, set_note, get_note), then meets the
mode's event 0.2 s to 4 s after it is up; the survivor runs the app's own recovery jobs throughout.
Every trial is judged from the database: lost, duplicate writes, recovery time (tests/support/trials.py).

Slow (about 10 s a round), so it runs only when asked:

    LIYAGENT_KILL_TRIALS=200 .venv/bin/python -m pytest tests/unit/test_kill_trials.py -q

TICKETIQ_KILL_TRIALS is accepted too. LIYAGENT_KILL_SEED fixes the kill timings for a repeat run (the
seed is printed). LIYAGENT_KILL_MODE is kill (default), stop, db, dbrestart, vendor, failover, stall or
roll (see trial_rig.py; db and dbrestart take the suite's embedded Postgres away, SIGKILLed or stopped
with `ticketiq db stop` and started with `ticketiq db url`, `trial_postgres.py`: they need it embedded,
TICKETIQ_DATABASE_URL unset; failover and stall run the processes on a pg_auto_failover formation and
strike its primary node, `trial_formation.py`: `make pg-auto-failover` installs it; roll runs a real
`ticketiq cluster --processes 2` and rolls it each round under a client of its edge whose every request
must be served, `trial_roll.py`: `make haproxy` installs HAProxy).
LIYAGENT_KILL_MIX is the comma list of trial kinds each round begins: cron, teams, webhook, mcp (the
default; every kind in the formation modes), sync (a source sync of its own Jira project) and workflow
(a run of the `follow-up` workflow), e.g. LIYAGENT_KILL_MIX=cron,teams,webhook,mcp,sync,workflow. The results land in
results/kill-trials-<mode>.json and .png (-<kinds> added for another mix); `make test` runs a smoke of
3 rounds.
"""

from __future__ import annotations

import os
import random
import shlex
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from tests.support import trial_report
from tests.support.cluster import Cluster
from tests.support.postgres import SuitePostgres
from tests.support.trial_formation import FORMATION_MODES, FormationRig
from tests.support.trial_postgres import POSTGRES_MODES
from tests.support.trial_rig import MODE_SETTINGS, MODEL_LATENCY_MS, MODES, Rig
from tests.support.trial_roll import RolledCluster, RollRig
from tests.support.trials import RECOVERY_LIMIT_S, Tally, default_mix, parse_mix


def _setting(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"LIYAGENT_{name}", os.environ.get(f"TICKETIQ_{name}", default))


ROUNDS = int(_setting("KILL_TRIALS") or 0)
MODE = _setting("KILL_MODE", "kill") or "kill"
SEED = int(_setting("KILL_SEED") or random.randrange(1 << 30))
MIX_TEXT = _setting("KILL_MIX")
HOW = "LIYAGENT_KILL_TRIALS=200 .venv/bin/python -m pytest tests/unit/test_kill_trials.py -q"

pytestmark = [
    pytest.mark.skipif(ROUNDS <= 0, reason=f"kill trials are slow; run them with: {HOW}"),
    # The suite's 300 s per test is for one test; the trials are many rounds (about 10 s each, a stop
    # round about 15 s), so the bound grows with them.
    pytest.mark.timeout(300 + 90 * ROUNDS),
]


@pytest.fixture
def mix() -> tuple[str, ...]:
    """The kinds each round begins; a bad LIYAGENT_KILL_MIX fails here, before any process starts."""
    try:
        return parse_mix(MIX_TEXT, default_mix(MODE))
    except ValueError as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)


@pytest.fixture
def formation(tmp_path: Path) -> Iterator[FormationRig | None]:
    """The formation modes' pg_auto_failover formation, in the trial's own home; stopped and deleted after."""
    if MODE not in FORMATION_MODES:
        yield None
        return
    made = FormationRig(tmp_path)
    try:
        made.up()
        yield made
    finally:
        made.down()


@pytest.fixture
def rolled(db_url: str, tmp_path: Path) -> Iterator[RolledCluster | None]:
    """Mode roll's `ticketiq cluster --processes 2` on the test's database; ended after, as a person ends it."""
    if MODE != "roll":
        yield None
        return
    made = RolledCluster.launch(db_url, tmp_path)
    try:
        yield made
    finally:
        made.end()


@pytest.fixture
def cluster(
    mix: tuple[str, ...], db_url: str, tmp_path: Path, formation: FormationRig | None, rolled: RolledCluster | None
) -> Iterator[Cluster]:
    if rolled is not None:  # the roll mode's processes and stand-ins are the cluster command's own
        beside = Cluster(db_url, tmp_path).attach(rolled.standins_base, rolled.env)
        try:
            yield beside
        finally:
            beside.stop()
        return
    # On the formation the stand-ins keep their records in the suite's Postgres (a vendor does not fail
    # over with us), read from the formation through postgres_fdw.
    app_url = formation.url if formation is not None else db_url
    started = Cluster(app_url, tmp_path, standin_args=("--model-latency-ms", str(MODEL_LATENCY_MS)),
                      standins_db_url=db_url if formation is not None else None)  # fmt: skip
    try:
        started.start()
        if formation is not None:
            formation.mirror_standins(db_url)
        yield started
    finally:
        started.stop()


def command(mix: tuple[str, ...] | None = None) -> str:
    mix = mix or default_mix(MODE)
    env = [f"LIYAGENT_KILL_TRIALS={ROUNDS}", f"LIYAGENT_KILL_SEED={SEED}"]
    env += [f"LIYAGENT_KILL_MODE={MODE}"] if MODE != "kill" else []
    env += [f"LIYAGENT_KILL_MIX={','.join(mix)}"] if mix != default_mix(MODE) else []
    return " ".join(env) + " .venv/bin/python -m pytest tests/unit/test_kill_trials.py -q"


def test_kill_trials_lose_nothing_and_double_nothing(
    mix: tuple[str, ...],
    cluster: Cluster,
    formation: FormationRig | None,
    rolled: RolledCluster | None,
    pg: SuitePostgres,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert MODE in MODES, f"LIYAGENT_KILL_MODE must be one of {', '.join(MODES)}, not {MODE!r}"
    if MODE in POSTGRES_MODES and pg.server is None:
        pytest.skip(f"{MODE} mode restarts the suite's embedded Postgres; unset TICKETIQ_DATABASE_URL to run it")
    home = pg.server.home if pg.server is not None else None
    rig = (RollRig(cluster, rolled, random.Random(SEED), mix) if rolled is not None
           else Rig(cluster, MODE, random.Random(SEED), home, mix, formation))  # fmt: skip
    tally = Tally()
    tally.extra["settings"] = ", ".join(f"TICKETIQ_{k.upper()}={v}" for k, v in MODE_SETTINGS.get(MODE, {}).items())
    started, clock = trial_report.now(), time.monotonic()
    with capsys.disabled():
        console = Console()
        console.print(
            f"kill trials: mode {MODE}, mix {','.join(mix)}, {ROUNDS} rounds, seed {SEED} "
            f"(repeat: {shlex.quote(command(mix))})"
        )
        try:
            rig.start()
            with trial_report.Live(console, MODE, ROUNDS) as live:
                for no in range(ROUNDS):
                    played = rig.play(no)
                    tally.add_round(played.verdicts, played.problems)
                    for key, value in played.extra.items():
                        _fold(tally.extra, key, value)
                    live.advance(tally)
        finally:
            rig.stop()
            outcome = trial_report.result(tally, MODE, SEED, command(mix), started, time.monotonic() - clock, mix)
            path = trial_report.write(outcome, tally)
            console.print(trial_report.summary_table(tally, MODE, SEED))
            console.print(trial_report.kinds_table(tally))
            console.print(f"result: {path}; histogram: {path.with_suffix('.png')}")
    assert not tally.failures, (f"seed {SEED}: " + "; ".join(tally.failures[:20]), rig.logs()[-20000:])
    assert tally.enough_in_flight(), (
        f"seed {SEED}: only {tally.in_flight} of {tally.trials} trials were caught in flight; the harness tests nothing"
    )
    assert tally.slowest <= RECOVERY_LIMIT_S


def _fold(extra: dict[str, object], key: str, value: object) -> None:
    """Per-round extras summed over the rounds (counts) or counted (flags)."""
    if isinstance(value, bool):
        extra[key] = int(extra.get(key, 0)) + int(value)  # type: ignore[call-overload]
    elif isinstance(value, int | float):
        extra[key] = extra.get(key, 0) + value  # type: ignore[operator]
    else:
        extra[key] = value
