"""`make screenshots`: the README's pictures of the console, taken by the browser the tests drive.

    python -m tests.browser.screenshots docs/console

Starts Postgres, the stand-ins and two app processes (one SIGKILLs itself after sending its first write,
so one run survives a kill), makes a few runs of each kind, and writes runs.png, run-survived-kill.png and
approvals.png. Everything it started is stopped, also on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright

from tests.browser.rig import VIEWPORT, Console, agents_file, launch, sign_in
from tests.support import postgres
from tests.support.cluster import Cluster


def runs(console: Console, victim_base: str) -> str:
    """The runs the pictures show; returns the one that survived a kill."""
    cluster = console.cluster
    victim = next(a for a in cluster.apps if a.base == victim_base)
    survived = cluster.post_run(victim, "triage", "Triage OPS-4211: checkout latency above 2 s in eu-west")
    victim.child.proc.wait(60)
    admin = cluster.token
    # Its comment is held for approval (the pictures' agents file): approved, it goes on to the end.
    held = console.waiting(survived, "approval")["approval_id"]
    console.api("POST", f"/v1/approvals/{held}", admin, json={"decision": "approve", "reason": "on call ok"})
    console.ended(survived)
    oncall = console.token("oncall", "operator")
    for n, text in ((4212, "payments webhook retries piling up"), (4213, "login page 502 after deploy")):
        console.ended(console.start_run(oncall, "reader", f"Read OPS-{n}: {text}"))
    for n in (4214, 4215):
        console.waiting(console.start_run(oncall, "triage", f"Triage OPS-{n}: disk 91% on db-replica-2"), "approval")
    asked = console.start_run(admin, "asker", "Note OPS-4216 for the weekly review")
    console.waiting(asked, "input")
    stopped = console.start_run(oncall, "asker", "Note OPS-4217")
    console.waiting(stopped, "input")
    console.api("POST", f"/v1/runs/{stopped}/stop", oncall, json={}).raise_for_status()
    console.ended(stopped)
    return survived


async def pictures(out: Path, console: Console, survived: str) -> None:
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        try:
            page = await (await browser.new_context(viewport=VIEWPORT)).new_page()
            await sign_in(page, console.base, console.cluster.token)
            await page.screenshot(path=str(out / "runs.png"))
            await page.goto(f"{console.base}/console/runs/{survived}")
            await page.screenshot(path=str(out / "run-survived-kill.png"), full_page=True)
            await page.goto(f"{console.base}/console/approvals")
            await page.screenshot(path=str(out / "approvals.png"))
        finally:
            await browser.close()


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(contextlib.contextmanager(postgres.start)())
        url = pg.fresh_database()
        stack.callback(pg.drop, url)
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ticketiq-screens-")))
        cluster = Cluster(url, tmp)
        stack.callback(cluster.stop)
        cluster.start()
        agents = str(agents_file(tmp))
        survivor = cluster.app("survivor", lead=True, agents=agents)
        victim = cluster.app("victim", lead=False, agents=agents, fault_point="after_send", fault_after=1)
        console = Console(cluster, survivor, {"cluster-admin": cluster.token})
        survived = runs(console, victim.base)
        # Only the browser's part on a loop: postgres.start runs a loop of its own, which cannot nest in one.
        asyncio.run(pictures(out, console, survived))
    print(f"wrote {out}/runs.png, {out}/run-survived-kill.png, {out}/approvals.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console")))
