"""The console's operator pages in Chromium, each with real rows and its actions working: a job's
progress, cancelling it and restarting it (through the page's forms, with their CSRF token); a cron
schedule that fired, with its fire and run; the Teams inbox with a delivered turn; the processes, live
and ended; the run list's counts saying what they count; a run's final answer labelled as such. The app
is a real `ticketiq serve` (with the test job kinds, `tests/support/job_kinds.py`) and the stand-ins."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from playwright.async_api import Page, expect

from tests.browser.rig import Console, agents_file, shot, sign_in
from tests.support import job_kinds, preforked
from tests.support.cluster import Cluster
from tests.support.http import web
from tests.support.postgres import SuitePostgres
from ticketiq.engine import resume
from ticketiq.runtime import release
from ticketiq.standins.server import STANDIN_BOT_APP_ID

TEAM = "standin-team"  # the one team the stand-in Graph holds (as tests/integration/test_teams_inbox.py)


@pytest.fixture(scope="module")
def site(pg: SuitePostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """One app process (knowing the test job kinds; a Teams message starts a `reader` turn) and the
    stand-ins for the module; each test makes its own rows."""
    url = pg.fresh_database()
    tmp = tmp_path_factory.mktemp("pages")
    try:
        cluster = Cluster(url, tmp).start()
        try:
            app = cluster.app("console", env=job_kinds.serving_with_test_kinds(tmp / "kinds"),
                              agents=str(agents_file(tmp)), teams_agent="reader")  # fmt: skip
            yield Console(cluster, app, {"cluster-admin": cluster.token})
        finally:
            cluster.stop()
    finally:
        pg.give_back(url)


def until(check: Callable[[], Any], what: str, timeout_s: float = 60) -> Any:
    """The first truthy value `check` gives; fails (not timed: a bound on a wait) when none came."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.1)


def job(site: Console, token: str, job_id: str) -> dict[str, Any]:
    got = site.api("GET", f"/v1/jobs/{job_id}", token)
    got.raise_for_status()
    found: dict[str, Any] = got.json()
    return found


async def test_a_job_s_progress_then_cancel_and_restart_through_the_page(site: Console, page: Page) -> None:
    token = site.token("jobs-op", "operator")
    # Slow enough to be seen running: 200 ms a step, 600 steps; it is cancelled long before its end.
    made = site.api("POST", "/v1/jobs", token, json={"kind": "count", "params": {"to": 600, "step_ms": 200}})
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]
    until(lambda: job(site, token, job_id)["progress"]["done"] >= 2, "the job's second step")
    await sign_in(page, site.base, token, "/console/jobs")
    row = page.locator(f'tr[data-job="{job_id}"]')
    await expect(row.locator(".badge")).to_have_text("running")
    await expect(row.locator("td.progress")).to_contain_text("/ 600 steps")
    assert int(await row.locator("progress").get_attribute("value") or 0) >= 2
    assert await row.locator("progress").get_attribute("max") == "600"
    await shot(page, "jobs-running")
    await row.locator("button", has_text="Cancel").click()
    await expect(page.locator(".notice")).to_have_text("Cancel requested.")
    ended = until(lambda: (j := job(site, token, job_id))["status"] == "cancelled" and j, "the job's cancel")
    assert ended["cancel_requested_by"] == "jobs-op"
    await page.reload()
    await expect(row.locator(".badge")).to_have_text("cancelled")
    await expect(row.locator("button", has_text="Cancel")).to_have_count(0)
    await row.locator("button", has_text="Restart").click()
    await expect(page.locator(".notice")).to_have_text("Restarted as a new job.")
    listed = site.api("GET", "/v1/jobs", token).json()["jobs"]
    again = next(j for j in listed if j["restarted_from"] == job_id)
    assert (again["kind"], again["params"]["to"], again["created_by"]) == ("count", 600, "jobs-op")
    await expect(page.locator(f'tr[data-job="{again["id"]}"]')).to_be_visible()
    await shot(page, "jobs-restarted")
    # Restarting the same job again is refused as the API refuses it, naming why.
    csrf = await page.locator('header input[name="csrf"]').get_attribute("value")
    twice = await page.request.post(f"{site.base}/console/jobs/{job_id}/restart", form={"csrf": csrf or ""})
    assert twice.status == 409 and f"was restarted already, as job {again['id']}" in await twice.text()
    site.api("POST", f"/v1/jobs/{again['id']}/cancel", token).raise_for_status()


async def test_a_cron_schedule_with_its_fire_and_the_run_it_made(site: Console, page: Page) -> None:
    admin = site.cluster.token
    made = site.api("POST", "/v1/schedules", admin, json={"agent": "reader", "cron": "* * * * *", "timezone": "UTC",
                                                          "input": "Read OPS-301 on the hour"})  # fmt: skip
    assert made.status_code == 201, made.text
    schedule = made.json()
    # Due now rather than at the next minute: the leader's next check fires it (its real path).
    site.cluster.rows("UPDATE schedules SET next_fire_at = date_trunc('minute', now()) WHERE id = %s",
                      schedule["id"])  # fmt: skip

    def fired() -> dict[str, Any] | None:
        fires = site.api("GET", f"/v1/schedules/{schedule['id']}/fires", admin).json()["fires"]
        return next((f for f in fires if f["status"] == "succeeded"), None)

    fire = until(fired, "the schedule's fire and its run")
    await sign_in(page, site.base, site.token("sched-op", "operator"), "/console/schedules")
    section = page.locator("section.schedule", has_text=schedule["id"][:8])
    await expect(section.locator("h2")).to_contain_text("* * * * * (UTC) · agent reader")
    await expect(section).to_contain_text("Read OPS-301 on the hour")
    fire_row = section.locator("tbody tr").first
    await expect(fire_row.locator(".badge")).to_have_text("succeeded")
    await expect(fire_row).to_contain_text("OPS-301")  # its outcome: the run's answer
    await shot(page, "schedules")
    await fire_row.locator(f'a[href="/console/runs/{fire["run_id"]}"]').click()
    await expect(page.locator("#run-status .badge")).to_have_text("succeeded")
    await expect(page.locator("dl.facts")).to_contain_text("cron")


async def test_the_teams_inbox_with_a_delivered_turn_and_its_run(site: Console, page: Page) -> None:
    standins = site.cluster.standin_url
    service_url = site.cluster.env["TICKETIQ_TEAMS_SERVICE_URL"]
    minted = web.post(f"{standins}/_standin/botframework/token",
                        json={"audience": STANDIN_BOT_APP_ID, "service_url": service_url}, timeout=30)  # fmt: skip
    minted.raise_for_status()
    activity = {
        "type": "message", "id": "act-console-1", "timestamp": "2024-05-01T10:00:00.000Z", "serviceUrl": service_url,
        "channelId": "msteams", "from": {"id": "29:user-ana", "name": "Ana", "aadObjectId": "aad-ana"},
        "conversation": {"id": "19:support@thread.tacv2;messageid=1700000000901", "conversationType": "channel"},
        "recipient": {"id": "28:bot", "name": "TicketIQ"}, "text": "Read OPS-401 please",
        "channelData": {"team": {"id": "19:team@thread.tacv2", "aadGroupId": TEAM}, "tenant": {"id": "t"}},
    }  # fmt: skip
    sent = web.post(f"{site.base}/v1/teams/messages", json=activity,
                      headers={"Authorization": f"Bearer {minted.json()['access_token']}"}, timeout=30)  # fmt: skip
    assert sent.status_code in (200, 201, 202), sent.text
    operator = site.token("teams-op", "operator")

    def replied() -> dict[str, Any] | None:
        entries = site.api("GET", "/v1/teams/inbox", operator).json()["entries"]
        return next((e for e in entries if e["activity_id"] == "act-console-1" and e["status"] == "replied"), None)

    entry = until(replied, "the turn's reply")
    await sign_in(page, site.base, operator, "/console/teams")
    row = page.locator("table.teams tbody tr", has_text="Read OPS-401 please")
    await expect(row).to_contain_text("Ana")
    await expect(row.locator(".badge")).to_have_text("replied")
    await shot(page, "teams")
    await row.locator(f'a[href="/console/runs/{entry["run_id"]}"]').click()
    await expect(page.locator("#run-status .badge")).to_have_text("succeeded")
    await expect(page.locator("#run-input")).to_contain_text("Read OPS-401 please")


async def test_the_processes_live_and_ended(site: Console, page: Page) -> None:
    brief = site.cluster.app("brief", agents=str(agents_file(site.cluster.tmp)), lead=False)
    brief_pid = brief.pid
    operator = site.token("procs-op", "operator")
    until(lambda: any(p["pid"] == brief_pid for p in site.api("GET", "/v1/processes", operator).json()["processes"]),
          "the second process's liveness")  # fmt: skip
    brief.child.stop()  # SIGTERM: it stops, and says so

    def stop_recorded() -> bool:
        ended = site.api("GET", "/v1/processes", operator).json()["ended"]
        return any(p["pid"] == brief_pid and p["how"] == "stopped" for p in ended)

    until(stop_recorded, "the stop recorded")
    # A run a newer release left (its checkpoint's state format is newer than any live process's, its
    # process gone, its lease lapsed): listed, and its page says what it waits for.
    left = site.start_run(operator, "reader", "Read OPS-601")
    site.ended(left)
    newer = resume.THIS_RELEASE.state_format + 1
    site.cluster.rows("UPDATE checkpoints SET state_format = %s WHERE run_id = %s", newer, left)
    site.cluster.rows("UPDATE runs SET status = 'running' WHERE id = %s", left)
    site.cluster.rows("INSERT INTO leases (name, holder, expires_at) VALUES ('checkpoint:' || %s, 'gone', now())", left)
    await sign_in(page, site.base, operator, "/console/processes")
    live = page.locator("table.processes tbody tr", has=page.locator(f'td.num:text-is("{site.app.pid}")'))
    await expect(live.locator(".badge").first).to_have_text("alive")
    await expect(live).to_contain_text("leader")
    running = release.current()
    await expect(live).to_contain_text(f"{running.version} {running.commit[:8]}")  # the release it runs
    await expect(live).to_contain_text(
        f"state {resume.THIS_RELEASE.state_format} · seal {resume.THIS_RELEASE.seal_format}"
    )
    left_row = page.locator("table.left tbody tr", has=page.locator(f'a[href="/console/runs/{left}"]'))
    await expect(left_row).to_contain_text("gone")
    await expect(left_row.locator("td.num").first).to_have_text(str(newer))
    ended_table = page.locator("main table.ended")
    ended = ended_table.locator("tbody tr", has=page.locator(f'td.num:text-is("{brief_pid}")'))
    await expect(ended.locator(".badge")).to_have_text("stopped")
    # The suite's Postgres has no standby: a commit is on it alone, and the page says so.
    await expect(page.locator("p.database .badge")).to_have_text("one copy")
    await expect(page.locator("p.database")).to_contain_text("ONE COPY: no standby")
    await shot(page, "processes")
    await left_row.locator("a").click()
    await expect(page.locator("#waiting li.release")).to_contain_text(
        f"a process that knows checkpoint state format {newer} and seal format {resume.THIS_RELEASE.seal_format}"
    )
    await shot(page, "run-left-for-a-newer-release")


async def test_the_runs_counts_say_the_ended_ones_are_of_the_last_day(site: Console, page: Page) -> None:
    token = site.token("counter", "caller")
    site.ended(site.start_run(token, "reader", "Read OPS-501"))
    await sign_in(page, site.base, token)
    window = page.locator("#counts-window")
    await expect(window).to_have_text("ended, made in the last 24 h:")
    # The statuses still going come before it, the ended ones after it, each saying what it counts.
    statuses = await page.locator("#counts .count[data-status], #counts-window").evaluate_all(
        "els => els.map(e => e.dataset.status || 'WINDOW')"
    )
    assert statuses == ["queued", "running", "waiting", "answered", "WINDOW", "succeeded", "failed", "interrupted",
                        "stopped"]  # fmt: skip
    succeeded = page.locator('#counts .count[data-status="succeeded"]')
    await expect(succeeded.locator("b")).to_have_text("1")
    assert "made in the last 24 h" in (await succeeded.get_attribute("title") or "")
    await shot(page, "runs")


async def test_a_run_s_final_answer_is_labelled_answer_so_its_steps_agree(site: Console, page: Page) -> None:
    token = site.token("answer-op", "operator")
    run_id = site.start_run(token, "reader", "Read OPS-601")
    assert site.ended(run_id)["status"] == "succeeded"
    await sign_in(page, site.base, token, f"/console/runs/{run_id}")
    steps = int(await page.locator("#run-steps").inner_text())
    rows = page.locator("#waterfall tr.fall-row")
    numbered = page.locator("#waterfall tr.fall-row:not(.answer)")
    await expect(numbered).to_have_count(steps)
    await expect(rows).to_have_count(steps + 1)
    answer = page.locator("#waterfall tr.fall-row.answer")
    await expect(answer.locator("td").first).to_have_text("answer")
    await expect(answer.locator("ul.bar-labels")).to_contain_text("answer")
    await expect(answer.locator("rect.bar.call")).to_have_count(0)
    await shot(page, "run")


async def test_a_caller_is_refused_the_jobs_page_and_its_forms_as_the_api_refuses_them(
    site: Console, page: Page
) -> None:
    operator = site.token("owner-of-job", "operator")
    made = site.api("POST", "/v1/jobs", operator, json={"kind": "count", "params": {"to": 1}})
    assert made.status_code == 201, made.text
    caller = site.token("nosy", "caller")
    api = site.api("GET", "/v1/jobs", caller)
    assert api.status_code == 403
    await sign_in(page, site.base, caller)
    await expect(page.locator("header nav")).not_to_contain_text("Jobs")
    refused = await page.goto(f"{site.base}/console/jobs")
    assert refused is not None and refused.status == 403
    await expect(page.locator("p.error")).to_contain_text(api.json()["detail"][0]["msg"])
    csrf = await page.locator('header input[name="csrf"]').get_attribute("value")
    cancel = await page.request.post(f"{site.base}/console/jobs/{made.json()['id']}/cancel", form={"csrf": csrf or ""})
    api_cancel = site.api("POST", f"/v1/jobs/{made.json()['id']}/cancel", caller)
    assert cancel.status == api_cancel.status_code == 403
    assert api_cancel.json()["detail"][0]["msg"] in await cancel.text()
    assert job(site, operator, made.json()["id"])["cancel_requested_at"] is None
    await shot(page, "refused")
    # A console page that is not there: the console's own page, not the API's JSON.
    missing = await page.goto(f"{site.base}/console/no-such-page")
    assert missing is not None and missing.status == 404
    assert "script-src 'self'" in (await missing.header_value("content-security-policy") or "")
    await expect(page.locator("h1")).to_have_text("Not found")
    await expect(page.locator("header .me")).to_have_count(0)  # an error page looks up no session
    await shot(page, "not-found")


async def test_the_processes_page_shows_each_processs_mcp_servers(site: Console, page: Page) -> None:
    """A process whose agents file declares a server no one serves: the page says it is unreachable and why,
    beside the stand-ins' server that is ready; what the server's URL holds is shown as text, never markup."""
    agents = yaml.safe_load(agents_file(site.cluster.tmp).read_text())
    down = "http://127.0.0.1:1/mcp?<b>x</b>"
    agents["mcp_servers"]["down"] = {"url": down}
    path = site.cluster.tmp / "agents-mcp-down.yaml"
    path.write_text(yaml.safe_dump(agents))
    other = site.cluster.app("mcp-down", agents=str(path), lead=False)
    operator = site.token("mcp-op", "operator")
    try:

        def reported() -> dict[str, Any] | None:
            live = site.api("GET", "/v1/processes", operator).json()["processes"]
            mine = [p for p in live if p["pid"] == other.pid]
            servers = {s["name"]: s for s in mine[0]["mcp_servers"]} if mine else {}
            return servers if servers.get("down", {}).get("state") == "unreachable" else None

        servers = until(reported, "the unreachable server reported")
        assert servers["down"]["where"] == down and servers["down"]["error"]
        await sign_in(page, site.base, operator, "/console/processes")
        row = page.locator("table.processes tbody tr", has=page.locator(f'td.num:text-is("{other.pid}")'))
        unreachable = row.locator('.mcp-server[data-server="down"]')
        await expect(unreachable.locator(".badge.bad")).to_have_text("unreachable")
        await expect(unreachable.locator(".mcp-error.warn")).to_have_text(servers["down"]["error"])
        await expect(unreachable).to_contain_text(down)  # the URL's markup as text
        assert await unreachable.locator("b").count() == 0
        ready = row.locator('.mcp-server[data-server="notes"]')
        await expect(ready.locator(".badge.ok")).to_have_text("ready")
        await expect(ready).to_contain_text(f"{site.cluster.standin_url}/mcp")
        await expect(ready).to_contain_text("4 tools")
        assert await ready.locator(".mcp-error").count() == 0
        await shot(page, "processes-mcp")
    finally:
        other.child.stop()


async def test_the_processes_page_shows_the_last_retention_pass(site: Console, page: Page) -> None:
    operator = site.token("retention-op", "operator")
    ended = site.start_run(operator, "reader", "Read OPS-611")
    site.ended(ended)
    await asyncio.sleep(1.2)
    # The module's other tests keep their runs: held while this pass runs, released after.
    others = site.cluster.rows("UPDATE runs SET held_at = now() WHERE id <> %s AND held_at IS NULL RETURNING id", ended)
    purged = preforked.run([sys.executable, "-m", "ticketiq.cli", "retention", "run"],
                           env={**site.cluster.env, "TICKETIQ_RETENTION_RUNS": "1s"}, timeout=120)  # fmt: skip
    site.cluster.rows("UPDATE runs SET held_at = NULL WHERE id = ANY(%s)", [r["id"] for r in others])
    assert purged.returncode == 0, purged.stderr
    shown = site.api("GET", "/v1/processes", operator).json()["retention"]
    assert shown["state"] == "done" and shown["deleted"]["runs"] >= 1
    await sign_in(page, site.base, operator, "/console/processes")
    said = page.locator("p.retention")
    await expect(said.locator(".badge")).to_have_text("done")
    await expect(said).to_contain_text(f"deleted {shown['total']:,} rows")
    await expect(said).to_contain_text("runs")
    await shot(page, "processes-retention")
