"""A run whose app process is SIGKILLed mid-run, seen in Chromium: its page shows both attempts, the
process that lost it and the one that took it over, and how the write in flight was settled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from tests.browser.rig import Console, sign_in
from tests.support.cluster import Cluster
from tests.support.postgres import SuitePostgres


@pytest.fixture
def two_processes(pg: SuitePostgres, tmp_path: Path) -> Iterator[tuple[Console, int]]:
    """A survivor that leads and serves the console, and a victim that SIGKILLs itself right after it sent
    the run's first write (the incident): that write is in flight, in doubt, when the process dies."""
    url = pg.fresh_database()
    cluster = Cluster(url, tmp_path)
    try:
        cluster.start()
        survivor = cluster.app("survivor", lead=True)
        victim = cluster.app("victim", lead=False, fault_point="after_send", fault_after=1)
        yield Console(cluster, survivor, {"cluster-admin": cluster.token}), victim.pid
    finally:
        cluster.stop()
        pg.give_back(url)


async def test_a_run_that_survived_a_kill_shows_both_attempts_the_processes_and_the_settlement(
    two_processes: tuple[Console, int], page: Page
) -> None:
    console, victim_pid = two_processes
    victim = console.cluster.apps[1]
    run_id = console.cluster.post_run(victim, "triage", "Triage OPS-901: survive the kill")
    assert victim.child.proc.wait(60) == -9  # SIGKILLed, by its own fault point
    run = console.ended(run_id)
    assert (run["status"], run["attempt"], run["losses"]) == ("succeeded", 2, 1), console.cluster.logs()
    await sign_in(page, console.base, console.cluster.token, f"/console/runs/{run_id}")
    attempts = page.locator("#recovery tr.attempt")
    await expect(attempts).to_have_count(2)
    first, second = attempts.nth(0), attempts.nth(1)
    await expect(first.locator("td.process")).to_contain_text(f":{victim_pid}:")  # the process that lost it
    await expect(first).to_contain_text("lost")
    survivor_pid = console.app.pid
    await expect(second.locator("td.process")).to_contain_text(f":{survivor_pid}:")  # the one that took it
    await expect(second.locator("td.taken-from")).to_contain_text(f":{victim_pid}:")
    assert await second.locator("td.num").nth(2).inner_text() != "—"  # how long the takeover took
    # What became of the write in flight: sent again with the same key (the incident vendor dedupes on it).
    settled = page.locator("#recovery table.settled tbody tr")
    await expect(settled).to_have_count(1)
    await expect(settled).to_contain_text("incidentio_create_incident")
    await expect(settled).to_contain_text("resent_same_key")
    # The ledger shows the same write, marked by attempt 1 and settled by attempt 2.
    await expect(page.locator('#ledger table.ledger[data-attempt="1"]')).to_contain_text("incidentio_create_incident")
    await expect(page.locator('#ledger table.ledger[data-attempt="1"] td.settlement')).to_contain_text("by attempt 2")
