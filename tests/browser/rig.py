"""The console in a real browser: Debian's Chromium, its headless shell, driven by Playwright (its
`executable_path`, never a downloaded browser) against `ticketiq serve` processes and the stand-ins on
real sockets (the crash tests' `Cluster`). Written once for the browser tests and `make screenshots`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from playwright.async_api import Browser, Page, Playwright, ViewportSize

from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.settings import Settings

CHROMIUM = "/usr/bin/chromium-headless-shell"
# The sample agents, with the comment on a Jira issue held for a person's approval too: a triage run
# waits at its third step until someone decides.
HELD_TOOL = "jira_add_comment"
TERMINAL = ("succeeded", "failed", "interrupted", "stopped")
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}


def chromium() -> str:
    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium-headless-shell")
    return CHROMIUM


async def launch(playwright: Playwright) -> Browser:
    # Chromium refuses to start its sandbox as root (CI containers); an unprivileged user keeps it.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    return await playwright.chromium.launch(executable_path=chromium(), headless=True, args=args)


def agents_file(folder: Path) -> Path:
    sample = yaml.safe_load(Path(str(Settings().agents)).read_text())
    sample["approval_required"] = sorted({*sample.get("approval_required", []), HELD_TOOL})
    path = folder / "agents.yaml"
    path.write_text(yaml.safe_dump(sample))
    return path


@dataclass
class Console:
    """A cluster serving the console, with tokens by name (the cluster's admin among them)."""

    cluster: Cluster
    app: App
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return self.app.base

    def token(self, name: str, role: str) -> str:
        if name not in self.tokens:
            made = web.post(f"{self.base}/v1/tokens", json={"name": name, "role": role},
                              headers=self.cluster.auth, timeout=30)  # fmt: skip
            made.raise_for_status()
            self.tokens[name] = str(made.json()["token"])
        return self.tokens[name]

    def api(self, method: str, path: str, token: str, **kw: Any) -> httpx.Response:
        return web.request(method, f"{self.base}{path}", headers={"Authorization": f"Bearer {token}"},
                             timeout=30, **kw)  # fmt: skip

    def start_run(self, token: str, agent: str, text: str) -> str:
        made = self.api("POST", "/v1/runs", token, json={"agent": agent, "input": text})
        made.raise_for_status()
        return str(made.json()["id"])

    def run(self, run_id: str) -> dict[str, Any]:
        got = self.api("GET", f"/v1/runs/{run_id}", self.cluster.token)
        got.raise_for_status()
        found: dict[str, Any] = got.json()
        return found

    def until(
        self, run_id: str, check: Callable[[dict[str, Any]], bool], what: str, timeout_s: float = 60
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.run(run_id)
            if check(run):
                return run
            assert time.monotonic() < deadline, f"run {run_id} never {what}: {run}\n{self.cluster.logs()}"
            time.sleep(0.05)

    def waiting(self, run_id: str, kind: str) -> dict[str, Any]:
        """What the run waits for, once it waits for a thing of this kind."""

        def on_it(r: dict[str, Any]) -> bool:
            return r["status"] == "waiting" and (r.get("waiting_for") or {}).get("kind") == kind

        run = self.until(run_id, on_it, f"waited for {kind}")
        waits: dict[str, Any] = run["waiting_for"]
        return waits

    def ended(self, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
        return self.until(run_id, lambda r: r["status"] in TERMINAL, "ended", timeout_s)


async def sign_in(page: Page, base: str, token: str, then: str = "/console/runs") -> None:
    await page.goto(f"{base}/console/login?next={then}")
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await page.wait_for_url(f"{base}{then}*")


async def shot(page: Page, name: str) -> None:
    """A full-page picture for a person to look at, when TICKETIQ_CONSOLE_SHOTS names a folder."""
    folder = os.environ.get("TICKETIQ_CONSOLE_SHOTS")
    if folder:  # page.screenshot makes the folder when it is missing
        await page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def start_console(db_url: str, tmp: Path, *standin_args: str) -> Console:
    cluster = Cluster(db_url, tmp, standin_args=standin_args).start()
    try:
        app = cluster.app("console", agents=str(agents_file(tmp)))
    except BaseException:
        cluster.stop()
        raise
    return Console(cluster, app, {"cluster-admin": cluster.token})
