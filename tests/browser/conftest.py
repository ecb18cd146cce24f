from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from playwright.async_api import Browser, Dialog, Page, async_playwright

from tests.browser.rig import VIEWPORT, Console, launch, start_console
from tests.support.postgres import SuitePostgres


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    # One driver and one Chromium a session (an xdist worker), from the first test that asks. Async: sync
    # Playwright keeps a loop running in the thread between calls, which the suite's async tests cannot run
    # beside; this one lives on the session's loop that they share. Each test still gets its own context.
    async with async_playwright() as playwright:
        chromium = await launch(playwright)
        try:
            yield chromium
        finally:
            await chromium.close()


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
        pg.give_back(url)


class Dialogs(list[str]):
    """Every alert, confirm or prompt a page opened (each is dismissed): a payload that ran would open one."""


@pytest.fixture
def dialogs() -> Dialogs:
    return Dialogs()


@pytest.fixture
async def page(browser: Browser, dialogs: Dialogs) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        opened = await context.new_page()

        async def seen(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            await dialog.dismiss()

        opened.on("dialog", seen)
        opened.set_default_timeout(30_000)
        yield opened
    finally:
        await context.close()
