from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, sync_playwright

from tests.browser.rig import Console, launch, start_console
from tests.support.postgres import SuitePostgres


@pytest.fixture
def browser() -> Iterator[Browser]:
    # Per test, not per session: sync Playwright keeps an event loop running in this thread while it is
    # started, and the suite's async tests (in the same session, in random order) need none running.
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def console(pg: SuitePostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """One app process and the stand-ins for a module's tests; each test makes its own runs and tokens."""
    url = pg.fresh_database()
    try:
        site = start_console(url, tmp_path_factory.mktemp("console"))
        try:
            yield site
        finally:
            site.cluster.stop()
    finally:
        pg.drop(url)


class Dialogs(list[str]):
    """Every alert, confirm or prompt a page opened (each is dismissed): a payload that ran would open one."""


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


@pytest.fixture
def page(browser: Browser, dialogs: Dialogs, tmp_path: Path) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        opened = context.new_page()

        def seen(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        opened.on("dialog", seen)
        opened.set_default_timeout(30_000)
        yield opened
    finally:
        context.close()
