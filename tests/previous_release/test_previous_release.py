"""Runs that the previous release (commit d7c25d5) really wrote, resumed by the code of today.

`d7c25d5.sql` is that release's database as its own processes left it, each killed mid-run
(`make_fixture.py` writes it by running that commit's code). Restored into an empty database, the
processes of today migrate it forward (the migrations since, while no process of that release is live)
and take the dead processes' runs over: every run succeeds, each write once across both releases."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.previous_release.make_fixture import FIXTURE, RELEASE, SCENARIOS, SEAL_KEYS
from tests.previous_release.test_side_by_side import each_write_once
from tests.support.cluster import Cluster
from tests.support.postgres import SuitePostgres
from ticketiq.storage.migrate import discover


@pytest.fixture
def previous_database(pg: SuitePostgres) -> Iterator[str]:
    """An empty database with the previous release's dump restored into it."""
    name = f"tq_previous_{os.getpid()}"
    with psycopg.connect(pg.admin_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
    try:
        url = pg.url(name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(FIXTURE.read_text().encode(), prepare=False)
        yield url
    finally:
        with psycopg.connect(pg.admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_runs_the_previous_release_left_in_flight_are_finished_by_todays_processes_each_write_once(
    previous_database: str, tmp_path: Path, make_cluster_on: Callable[..., Cluster]
) -> None:
    url = previous_database
    with psycopg.connect(url, autocommit=True) as conn:
        applied = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
        lost = conn.execute("SELECT id::text, input FROM runs WHERE status = 'running' ORDER BY input").fetchall()
    assert applied == list(range(1, 29)), f"{FIXTURE.name} is not the schema of {RELEASE}"
    assert len(lost) == len(SCENARIOS)
    cluster = make_cluster_on(url, SEAL_KEYS)
    survivor = cluster.app("today", lead=True)
    for run_id, text in lost:
        run = cluster.wait_run(run_id, 90)
        assert run["status"] == "succeeded", (text, run, cluster.logs())
        assert run["losses"] == 1  # its process died: one loss, the take of today's process
    with psycopg.connect(url, autocommit=True) as conn:
        now = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()]
    assert now == [m.version for m in discover()]  # migrated forward by today's process
    each_write_once(cluster, [ticket for *_, ticket in SCENARIOS])
    assert survivor.child.alive()


@pytest.fixture
def make_cluster_on(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(db_url: str, seal_keys: str) -> Cluster:
        cluster = Cluster(db_url, tmp_path).start()
        started.append(cluster)
        assert cluster.env["TICKETIQ_SEAL_KEYS"] == seal_keys, "the fixture's runs are sealed with the clusters' key"
        return cluster

    try:
        yield make
    finally:
        for cluster in started:
            cluster.stop()
