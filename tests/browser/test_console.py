"""The console in Chromium (issue 16, section 3): sign in and out, the live run list and its filters, a
run's waterfall and write ledger, approving, giving input, stopping, roles, CSRF, and untrusted text
staying text. One app process and the stand-ins serve the module; each test makes its own runs."""

from __future__ import annotations

import re
import time

from playwright.async_api import Page, Request, expect

from tests.browser.conftest import Dialogs
from tests.browser.rig import HELD_TOOL, Console, agents_file, shot, sign_in

PAYLOAD = ('<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2; alert(2)">'
           '<a href="javascript:window.__pwned = 3">click me</a>')  # fmt: skip


def row(page: Page, run_id: str) -> str:
    return f'#runs tr[data-run="{run_id}"]'


async def test_sign_in_then_out(console: Console, page: Page) -> None:
    token = console.token("nightshift", "operator")
    await page.goto(f"{console.base}/console/runs?status=waiting")
    # No session: the sign-in page, which comes back to the page asked for.
    await expect(page).to_have_url(re.compile(r"/console/login\?next=/console/runs%3Fstatus%3Dwaiting$"))
    await page.fill("#token", token)
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{console.base}/console/runs?status=waiting")
    await expect(page.locator("header .me")).to_contain_text("nightshift")
    assert all(token not in c["value"] for c in await page.context.cookies())
    assert token not in await page.content()
    await page.click("#sign-out")
    await expect(page.locator(".notice")).to_have_text("Signed out.")
    await page.goto(f"{console.base}/console/runs")
    await expect(page).to_have_url(re.compile(r"/console/login"))


async def test_a_long_pasted_token_shows_the_sign_in_form_again_naming_the_field(console: Console, page: Page) -> None:
    token = console.token("paster", "operator")
    await page.goto(f"{console.base}/console/login?next=/console/jobs")
    await page.fill("#token", "tiq_" + "A" * 197)  # 201 characters: a 500 before issue 32
    async with page.expect_navigation() as refused:
        await page.click("button[type=submit]")
    assert (await refused.value).status == 422
    await expect(page.locator("p.refusal")).to_have_text("body.token: token is longer than 200 characters")
    await expect(page.locator("#token")).to_have_value("")  # nothing of it echoed
    await shot(page, "sign-in-long-token")
    await page.fill("#token", token)  # the form shown again signs in, and goes where it was going
    await page.click("button[type=submit]")
    await expect(page).to_have_url(f"{console.base}/console/jobs")


async def test_the_list_shows_a_new_run_and_its_status_change_without_a_reload(console: Console, page: Page) -> None:
    token = console.token("lister", "caller")
    await sign_in(page, console.base, token)
    await page.evaluate("window.__same_page = true")
    run_id = console.start_run(token, "asker", "Note OPS-31 for me")
    badge = page.locator(f"{row(page, run_id)} td.st .badge")
    await expect(badge).to_have_text("waiting", timeout=30_000)
    await expect(page.locator(f"{row(page, run_id)} td.wf")).to_contain_text("Which environment does OPS-31 concern?")
    question = console.waiting(run_id, "input")["question_id"]
    given = console.api("POST", f"/v1/runs/{run_id}/input", token, json={"text": "staging", "question_id": question})
    assert given.status_code == 202, given.text
    await expect(badge).to_have_text("succeeded", timeout=30_000)
    assert await page.evaluate("window.__same_page") is True  # the page was never reloaded
    await expect(page.locator('#counts .count[data-status="succeeded"] b')).not_to_have_text("0")


async def test_filters_live_in_the_url(console: Console, page: Page) -> None:
    token = console.token("filterer", "caller")
    reader = console.start_run(token, "reader", "Read OPS-41 (filter-marker-41)")
    asker = console.start_run(token, "asker", "Note OPS-42 (filter-marker-42)")
    console.ended(reader)
    console.waiting(asker, "input")
    await sign_in(page, console.base, token)
    await page.check('form.filters input[name=status][value="waiting"]')
    await page.fill("form.filters input[name=agent]", "asker")
    await page.click("form.filters button[type=submit]")
    await expect(page).to_have_url(re.compile(r"status=waiting.*agent=asker"))
    await expect(page.locator(row(page, asker))).to_be_visible()
    await expect(page.locator(row(page, reader))).to_have_count(0)
    for status in await page.locator("#runs td.st .badge").all_inner_texts():
        assert status == "waiting"
    # A bookmarked filter: the text filter, straight from the URL.
    await page.goto(f"{console.base}/console/runs?q=filter-marker-41")
    await expect(page.locator(row(page, reader))).to_be_visible()
    await expect(page.locator(row(page, asker))).to_have_count(0)
    await expect(page.locator('form.filters input[name="q"]')).to_have_value("filter-marker-41")
    await page.goto(f"{console.base}/console/runs?status=sleeping")
    await expect(page.locator("p.error")).to_contain_text("query.status")


async def test_approve_a_held_call_then_the_run_goes_on_and_its_page_shows_the_waterfall_and_ledger(
    console: Console, page: Page
) -> None:
    token = console.token("approver", "operator")
    run_id = console.start_run(token, "triage", "Triage OPS-51: checkout is down")
    waits = console.waiting(run_id, "approval")
    assert waits["tool"] == HELD_TOOL
    await sign_in(page, console.base, token, f"/console/runs/{run_id}")
    await expect(page.locator("#waiting")).to_contain_text(HELD_TOOL)
    await page.fill("#waiting input[name=reason]", "looks right")
    await page.click("#waiting button[value=approve]")
    await expect(page.locator(".notice")).to_contain_text("Approved")
    await expect(page.locator("#run-status .badge")).to_have_text("succeeded", timeout=30_000)
    await expect(page.locator("#run-answer")).to_contain_text("Triaged OPS-51")
    # The waterfall: a row per step, each call's bar as wide as its share of the run's time.
    rows = page.locator("#waterfall tr.fall-row")
    await expect(rows).to_have_count(4)
    bars = page.locator("#waterfall rect.bar.call")
    widths = [float(w) for w in await bars.evaluate_all("rs => rs.map(r => r.getAttribute('width'))")]
    assert len(widths) == 4 and all(0 < w <= 1000 for w in widths)
    await expect(page.locator("#waterfall")).to_contain_text("model")
    # The ledger: every write with its key, mark, send and outcome; the held one with its approval.
    ledger = page.locator("#ledger table.ledger tbody tr")
    await expect(ledger).to_have_count(3)
    # Retrying assertions: the live parts of the page are swapped in while it is read, and a row read
    # mid-swap has no rendered cells (its text had no tabs to split once in a make test run).
    await expect(ledger.locator("td:nth-child(3)")).to_have_text(
        ["incidentio_create_incident", HELD_TOOL, "teams_reply"]
    )
    incident = ledger.nth(0).locator("td")
    for i in (4, 5, 6, 7):  # its key; marked, sent and outcome times
        await expect(incident.nth(i)).not_to_have_text("—")
    await expect(incident.nth(9)).to_have_text("ok")
    await expect(ledger.nth(1)).to_contain_text("approval")
    await page.click("#transcript summary")
    await expect(page.locator("#transcript table.transcript")).to_be_visible()
    # Its trace: no traceparent came with it, so the run is its own trace, named by its id (runtime/tracing.py).
    await expect(page.locator("#run-trace")).to_have_text(run_id.replace("-", ""))
    await shot(page, "run-approved")
    # The queue no longer holds it.
    await page.goto(f"{console.base}/console/approvals")
    await expect(page.locator(f'tr[data-approval="{waits["approval_id"]}"]')).to_have_count(0)


async def test_the_approvals_queue_decides_with_a_reason(console: Console, page: Page) -> None:
    token = console.token("queue-op", "operator")
    run_id = console.start_run(token, "triage", "Triage OPS-52: rejected")
    approval = console.waiting(run_id, "approval")["approval_id"]
    await sign_in(page, console.base, token, "/console/approvals")
    held = page.locator(f'tr[data-approval="{approval}"]')
    await expect(held).to_contain_text(HELD_TOOL)
    await expect(held).to_contain_text("OPS-52")  # its arguments
    await expect(held).to_contain_text("queue-op")  # who asked: the token that started the run
    await held.locator("input[name=reason]").fill("not this one")
    await held.locator("button[value=reject]").click()
    await expect(page.locator(".notice")).to_contain_text("Rejected")
    run = console.ended(run_id)
    assert run["status"] == "succeeded"  # the model was told and went on without the comment
    await page.goto(f"{console.base}/console/approvals?status=rejected")
    await expect(page.locator(f'tr[data-approval="{approval}"]')).to_contain_text("not this one")


async def test_a_request_withdrawn_with_its_run_leaves_the_queue_and_deciding_it_says_why(
    console: Console, page: Page
) -> None:
    token = console.token("withdrawer", "operator")
    run_id = console.start_run(token, "triage", "Triage OPS-53: stopped while its comment is held")
    approval = console.waiting(run_id, "approval")["approval_id"]
    await sign_in(page, console.base, token, "/console/approvals")
    held = page.locator(f'tr[data-approval="{approval}"]')
    await expect(held).to_contain_text(HELD_TOOL)
    # Stopped elsewhere while this queue is open; then approved from it (issue 32: "Approved: the run goes on").
    console.api("POST", f"/v1/runs/{run_id}/stop", token, json={}).raise_for_status()
    async with page.expect_navigation() as answered:
        await held.locator("button[value=approve]").click()
    assert (await answered.value).status == 409
    said = f"approval {approval} was withdrawn, so nothing was decided: its run ended (stopped): stopped by withdrawer"
    await expect(page.locator("p.refusal")).to_have_text(f"path.approval_id: {said}")
    await expect(page.locator(f'tr[data-approval="{approval}"]')).to_have_count(0)  # the queue, without it
    await expect(page.locator(".notice")).to_have_count(0)
    await shot(page, "approval-withdrawn-409")
    await page.goto(f"{console.base}/console/approvals?status=withdrawn")
    await expect(page.locator(f'tr[data-approval="{approval}"]')).to_contain_text("its run ended (stopped)")
    await shot(page, "approvals-withdrawn")
    await page.goto(f"{console.base}/console/runs/{run_id}")
    await expect(page.locator("#run-status .badge")).to_have_text("stopped")
    await expect(page.locator("#waiting")).not_to_contain_text(HELD_TOOL)
    await shot(page, "run-withdrawn")
    assert console.run(run_id)["status"] == "stopped"


async def test_give_input_to_a_waiting_run(console: Console, page: Page) -> None:
    token = console.token("inputter", "caller")
    run_id = console.start_run(token, "asker", "Note OPS-61")
    console.waiting(run_id, "input")
    await sign_in(page, console.base, token, f"/console/runs/{run_id}")
    await expect(page.locator("#waiting .question")).to_have_text("Which environment does OPS-61 concern?")
    await page.fill("#waiting input[name=text]", "production eu-west")
    await page.click("#waiting button[type=submit]")
    await expect(page.locator(".notice")).to_contain_text("Input given")
    await expect(page.locator("#run-status .badge")).to_have_text("succeeded", timeout=30_000)
    await expect(page.locator("#run-answer")).to_have_text("Noted OPS-61 for production eu-west.")


async def test_stop_a_run(console: Console, page: Page) -> None:
    token = console.token("stopper", "operator")
    run_id = console.start_run(token, "asker", "Note OPS-71")
    console.waiting(run_id, "input")
    await sign_in(page, console.base, token, f"/console/runs/{run_id}")
    await page.click("#stop")
    await expect(page.locator(".notice")).to_contain_text("Stop requested")
    await expect(page.locator("#run-status .badge")).to_have_text("stopped", timeout=30_000)
    await expect(page.locator("#run-error")).to_contain_text("stopped by stopper")
    await expect(page.locator("#stop")).to_have_count(0)


async def test_a_caller_cannot_see_another_callers_run_nor_approve(console: Console, page: Page) -> None:
    owner = console.token("owner-op", "operator")
    theirs = console.start_run(owner, "triage", "Triage OPS-81: not yours")
    approval = console.waiting(theirs, "approval")["approval_id"]
    caller = console.token("curious", "caller")
    await sign_in(page, console.base, caller)
    await expect(page.locator(row(page, theirs))).to_have_count(0)
    await expect(page.locator("header nav")).not_to_contain_text("Approvals")
    await page.goto(f"{console.base}/console/runs/{theirs}")
    await expect(page.locator("p.error")).to_contain_text(f"no run {theirs}")
    assert "OPS-81" not in await page.content()
    refused = await page.goto(f"{console.base}/console/approvals")
    assert refused is not None and refused.status == 403
    csrf = await page.locator('header input[name="csrf"]').get_attribute("value")
    assert csrf
    post = await page.request.post(
        f"{console.base}/console/approvals/{approval}", form={"csrf": csrf, "decision": "approve"}
    )
    assert post.status == 403 and "read and decide approvals" in await post.text()
    assert console.run(theirs)["status"] == "waiting"


async def test_a_post_without_its_csrf_token_is_refused(console: Console, page: Page) -> None:
    token = console.token("csrf-op", "operator")
    run_id = console.start_run(token, "asker", "Note OPS-91")
    console.waiting(run_id, "input")
    await sign_in(page, console.base, token, f"/console/runs/{run_id}")
    # The browser's own session cookie, without the form's token: what a forged form would send.
    forged: list[dict[str, str | float | bool]] = [{}, {"csrf": "x" * 43}]
    for form in forged:
        answer = await page.request.post(f"{console.base}/console/runs/{run_id}/stop", form=form)
        assert answer.status == 403 and "CSRF" in await answer.text()
    assert console.run(run_id)["status"] == "waiting"


async def test_untrusted_text_renders_as_text_and_runs_nothing(console: Console, page: Page, dialogs: Dialogs) -> None:
    # The Jira stand-in's issue carries the payload; the reader run reads it into its tool results and
    # its answer, and the input carries it too.
    console.cluster.rows("INSERT INTO standin.jira_issues (key, summary, description) VALUES ('ESC-1', %s, %s) "
                         "ON CONFLICT (key) DO UPDATE SET summary = excluded.summary", PAYLOAD, PAYLOAD)  # fmt: skip
    token = console.token("escaper", "operator")
    run_id = console.start_run(token, "reader", f"Read ESC-1 {PAYLOAD}")
    assert console.ended(run_id)["status"] == "succeeded"
    await sign_in(page, console.base, token)
    await expect(page.locator(row(page, run_id))).to_be_visible()
    await page.goto(f"{console.base}/console/runs/{run_id}")
    await page.click("#transcript summary")
    await expect(page.locator("#run-answer")).to_contain_text(f"Summary: {PAYLOAD}")
    await expect(page.locator("#run-input")).to_have_text(f"Read ESC-1 {PAYLOAD}")
    await expect(page.locator("#transcript")).to_contain_text("window.__pwned = 1")
    await page.mouse.move(10, 10)  # a hover handler, had one been made, would fire now
    assert await page.evaluate("typeof window.__pwned") == "undefined"
    assert await page.locator("main img, main script, main a[href^='javascript']").count() == 0
    assert dialogs == []


async def test_a_link_from_another_site_opens_the_run_for_a_signed_in_person(console: Console, page: Page) -> None:
    # A Teams card's "Open the run": the browser sends no SameSite=Strict cookie on a navigation another
    # site started, so the console asks once more from its own page, which carries it.
    token = console.token("linked", "operator")
    run_id = console.start_run(token, "reader", "Read OPS-99")
    console.ended(run_id)
    await sign_in(page, console.base, token)
    await page.goto("about:blank")
    await page.set_content(f'<a id="card" href="{console.base}/console/runs/{run_id}">Open the run</a>')
    await page.click("#card")
    await expect(page).to_have_url(f"{console.base}/console/runs/{run_id}")
    await expect(page.locator("#run-status .badge")).to_have_text("succeeded")
    # Signed out, the same link lands on the sign-in page, which comes back to the run.
    await page.context.clear_cookies()
    await page.goto("about:blank")
    await page.set_content(f'<a id="card" href="{console.base}/console/runs/{run_id}">Open the run</a>')
    await page.click("#card")
    await expect(page).to_have_url(re.compile(rf"/console/login\?next=/console/runs/{run_id}$"))


async def test_a_workflow_run_with_its_steps_and_the_jobs_page(console: Console, page: Page) -> None:
    token = console.token("flows-op", "operator")
    made = console.api("POST", "/v1/workflows/follow-up/runs", token, json={"input": {"issue": "OPS-77"}})
    assert made.status_code == 201, made.text
    flow_id = made.json()["id"]
    reads = 0
    while (flow := console.api("GET", f"/v1/workflows/follow-up/runs/{flow_id}", token).json())["status"] in (
        "queued", "running",
    ):  # fmt: skip
        reads += 1
        assert reads < 1200, "the workflow run never ended"
        await page.wait_for_timeout(50)
    executed = {s["step"] for s in flow["steps"]}
    await sign_in(page, console.base, token, "/console/workflows")
    await page.click(f'a[href="/console/workflows/{flow_id}"]')
    await expect(page.locator("h1")).to_contain_text("follow-up")
    steps = page.locator("main table.grid tbody tr")
    await expect(steps.first).to_contain_text("read")
    assert len(executed) >= 3 and {t.split("\t")[1] for t in await steps.all_inner_texts()} == executed
    await page.goto(f"{console.base}/console/jobs")
    await expect(page.locator(f'tr[data-job="{flow_id}"]')).to_contain_text("workflow")


async def test_a_run_page_stays_live_across_the_ends_of_its_event_streams(console: Console, page: Page) -> None:
    """Served by a process whose event streams last 2 s (TICKETIQ_STREAM_MAX_S): the page's EventSource
    follows each on with the last event's id (Last-Event-ID), is told nothing again (the page is not read
    again while the run waits) and never falls back to reading the page; the run's end then shows live.
    Without Last-Event-ID each stream would tell the run's status again, and the page would read itself."""
    short = console.cluster.app("short-streams", agents=str(agents_file(console.cluster.tmp)), stream_max_s=2)
    try:
        token = console.token("follower", "operator")
        run_id = console.start_run(token, "asker", "Note OPS-96")
        console.waiting(run_id, "input")
        followed: list[Request] = []
        reread: list[Request] = []

        def seen(request: Request) -> None:
            if request.url.endswith(f"/v1/runs/{run_id}/events"):
                followed.append(request)
            elif request.url.endswith(f"/console/runs/{run_id}") and request.resource_type == "fetch":
                reread.append(request)

        page.on("request", seen)
        await sign_in(page, short.base, token, f"/console/runs/{run_id}")
        await page.evaluate("window.__same_page = true")
        await expect(page.locator("#run-status .badge")).to_have_text("waiting")
        deadline = time.monotonic() + 30
        while len(followed) < 3:  # two streams ended and were followed on
            assert time.monotonic() < deadline, f"the page followed its events {len(followed)} times"
            await page.wait_for_timeout(100)
        asked = [(await r.all_headers()).get("last-event-id") for r in followed]
        assert asked[0] is None and all(asked[1:]), asked  # each stream after the first follows on
        # The first stream's events had the page read once; the streams after it told nothing, and the page
        # never fell back to reading itself every 2 s.
        assert len(reread) <= 1, reread
        await shot(page, "run-live-across-streams-waiting")
        question = console.waiting(run_id, "input")["question_id"]
        answer = {"text": "staging", "question_id": question}
        given = console.api("POST", f"/v1/runs/{run_id}/input", token, json=answer)
        assert given.status_code == 202, given.text
        await expect(page.locator("#run-status .badge")).to_have_text("succeeded", timeout=30_000)
        await expect(page.locator("#run-answer")).to_have_text("Noted OPS-96 for staging.")
        assert await page.evaluate("window.__same_page") is True
        await shot(page, "run-live-across-streams-succeeded")
    finally:
        short.child.stop()
