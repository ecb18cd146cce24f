"""The console's forms never answer 5xx (issue 32, finding 4): a refused field shows the form again with
a 4xx naming the field, and no traceback reaches the log. Against a real app on a real socket and a real
Postgres; the fuzz finds the console's POST routes in the app's routes, so a new form is fuzzed too.

The fuzz is seeded: `FORMS_FUZZ_SEED` replays a run (each run prints its seed, and every failure names
it); `FORMS_FUZZ_REQUESTS` says how many requests each client sends."""

from __future__ import annotations

import logging
import os
import random
import re
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.routing import APIRoute

from tests.integration.test_console import Site, csrf_of, site
from tests.support import job_kinds
from tests.support.engine import read_rows
from tests.support.http import TLS
from ticketiq.console import sessions
from ticketiq.entries.api import ROUTES

# The forms' own fields, and a few no form has.
FIELDS = ("csrf", "token", "next", "text", "question_id", "decision", "reason", "back", "action", "x")
# Lengths just past each form's limits (the sign-in token's 200, a reason's 2,000, an input's 100,000) and
# well past them; the largest stays under the 1 MiB every request body is held to (413 past it).
OVERSIZED = (201, 2_001, 100_001, 400_000)
ODD = ("\x00", "\ud800", "\x1b[2J", "\u202e", "../", "//evil.example", "\\", "%00", "\r\n", "🙂", "ñ", "\ufeff")


def console_posts() -> set[str]:
    """Every POST route of the console, as the app has it."""
    return {r.path for r in ROUTES.routes if isinstance(r, APIRoute) and "POST" in (r.methods or ())
            and r.path.startswith("/console/")}  # fmt: skip


def no_traceback(records: list[logging.LogRecord]) -> None:
    """What the fuzz's requests logged holds no traceback (uvicorn logs an unhandled one with exc_info)."""
    failed = [r for r in records if r.exc_info or "Exception in ASGI application" in r.getMessage()]
    assert not failed, [r.getMessage() for r in failed]


class Fuzz:
    """Random requests to the console's forms, from one seed."""

    def __init__(self, seed: int, known: dict[str, list[str]]) -> None:
        self.rng = random.Random(seed)
        self.known = known  # values a form would really carry: ids, the CSRF tokens, a real token

    def text(self) -> str:
        rng = self.rng
        kind = rng.randrange(6)
        if kind == 0:
            return ""
        if kind == 1:
            return "x" * rng.choice(OVERSIZED)
        if kind == 2:
            return "".join(rng.choice(ODD) for _ in range(rng.randrange(1, 5)))
        if kind == 3:
            return "".join(chr(rng.randrange(1, 0x2FFFF)) for _ in range(rng.randrange(1, 40)))
        if kind == 4:
            return str(uuid.UUID(int=rng.getrandbits(128)))
        return rng.choice(self.known["values"])

    def path(self, template: str) -> str:
        def segment(match: re.Match[str]) -> str:
            name, pick = match.group(1), self.rng.randrange(4)
            if pick == 0 and self.known.get(name):
                return self.rng.choice(self.known[name])
            text = self.text()[:5000] if pick < 3 else "y" * 5000  # httpx sends no URL past 64 KiB
            # Percent-encoded as sent (a lone surrogate as the bytes UTF-8 would give it, which are not UTF-8).
            return quote(text.encode("utf-8", "surrogatepass"), safe="") or "z"

        return re.sub(r"{(\w+)}", segment, template)

    def form(self, csrf: str | None) -> dict[str, str]:
        rng = self.rng
        chosen = rng.sample(FIELDS, rng.randrange(len(FIELDS) + 1))
        form = {name: self.text() for name in chosen}
        if csrf is not None and rng.random() < 0.7:
            form["csrf"] = csrf
        return form

    def request(self, template: str, csrf: str | None) -> dict[str, Any]:
        """The keyword arguments of one POST: its path, and a form as a browser, a script or a mistake sends it."""
        rng = self.rng
        # Lone surrogates cannot be sent as UTF-8 (the client would refuse them, not the server): the raw
        # bytes below send what they would become.
        form = {k: v.encode("utf-8", "replace").decode() for k, v in self.form(csrf).items()}
        sent: dict[str, Any] = {"url": self.path(template)}
        how = rng.randrange(5)
        if how == 0:  # a file among the fields
            sent["files"] = {"upload": ("a.txt", b"\x00\xff" * rng.randrange(1, 100), "text/plain")}
            sent["data"] = form
        elif how == 1:  # raw bytes as a form: invalid UTF-8, stray separators, percent escapes
            raw = b"&".join(rng.choice([b"csrf=%ff%fe", b"token=%00", b"=", b"&&", b"text=%E2%82", b"a=b=c",
                                        b"reason=%ED%A0%80", b"decision=approve"])
                            for _ in range(rng.randrange(1, 6)))  # fmt: skip
            sent["content"] = raw
            sent["headers"] = {"content-type": "application/x-www-form-urlencoded"}
        elif how == 2:  # multipart that is not
            sent["content"] = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n' + b"y" * rng.randrange(9)
            sent["headers"] = {"content-type": rng.choice(["multipart/form-data; boundary=x", "multipart/form-data"])}
        else:
            sent["data"] = form
        return sent


async def _known(s: Site, token: str) -> dict[str, list[str]]:
    """Real ids the forms take: a run waiting for input (its question), one waiting for approval (its
    request), a queued job; and the token, for the sign-in form."""
    asker = await s.run_waiting(token, "asker")
    held = await s.run_waiting(token, "a")
    question = (await read_rows(s.db_url, "SELECT id FROM inputs WHERE run_id = %s", asker))[0]["id"]
    approval = (await read_rows(s.db_url, "SELECT id FROM approvals WHERE run_id = %s", held))[0]["id"]
    job = await s.h.process.jobs.queue.submit("count", {"to": 3}, "ops")
    values = [str(question), str(approval), asker, held, "approve", "reject", token, f"/console/runs/{held}",
              "/console/approvals", "cancel", "restart"]  # fmt: skip
    return {"run_id": [asker, held], "approval_id": [str(approval)], "job_id": [job.id],
            "action": ["cancel", "restart"], "values": values}  # fmt: skip


@pytest.mark.long
async def test_random_and_oversized_fields_on_every_console_form_never_answer_5xx(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    seed = int(os.environ.get("FORMS_FUZZ_SEED") or random.randrange(2**32))
    count = int(os.environ.get("FORMS_FUZZ_REQUESTS") or 250)
    print(f"console forms fuzz: FORMS_FUZZ_SEED={seed}")
    routes = console_posts()
    assert {"/console/login", "/console/logout", "/console/runs/{run_id}/stop", "/console/runs/{run_id}/input",
            "/console/approvals/{approval_id}", "/console/jobs/{job_id}/{action}"} <= routes  # fmt: skip
    job_kinds.register(monkeypatch)
    caplog.set_level(logging.INFO)
    async with site(db_url, tmp_path, job_concurrency=0) as s:
        token = await s.h.token("fuzzer", "operator")
        fuzz = Fuzz(seed, await _known(s, token))
        templates = sorted(routes)
        answered: dict[int, int] = {}

        async def send(client: httpx.AsyncClient, csrf: str | None, signed: bool = True) -> httpx.Response:
            # Without a session every form but the sign-in form is a redirect to it: that one half the time.
            template = "/console/login" if not signed and fuzz.rng.random() < 0.5 else fuzz.rng.choice(templates)
            sent = fuzz.request(template, csrf)
            answer = await client.post(**sent)
            said = (seed, template, {k: str(v)[:300] for k, v in sent.items()}, answer.status_code, answer.text[:500])
            assert answer.status_code < 500, said
            answered[answer.status_code] = answered.get(answer.status_code, 0) + 1
            return answer

        # Signed in, the session's CSRF token in most forms.
        async with httpx.AsyncClient(verify=TLS, base_url=s.base, timeout=60) as client:
            csrf = await _signed_in(client, token)
            fuzz.known["values"].append(csrf)
            for _ in range(count):
                answer = await send(client, csrf)
                signed_out = answer.headers.get("location", "").startswith("/console/login")
                if signed_out or f"{sessions.COOKIE}=" in answer.headers.get("set-cookie", ""):
                    csrf = await _signed_in(client, token)  # signed out, or in anew, by the fuzz: its token anew
                    fuzz.known["values"].append(csrf)
        # No session: the sign-in form's cookie and its token in most forms, sometimes neither.
        async with httpx.AsyncClient(verify=TLS, base_url=s.base, timeout=60) as client:
            for _ in range(count):
                login_csrf = csrf_of(await client.get("/console/login")) if fuzz.rng.random() < 0.7 else None
                await send(client, login_csrf, signed=False)
                client.cookies.delete(sessions.COOKIE)  # signed in by the fuzz: without a session again
    no_traceback(caplog.records)
    print(f"console forms fuzz: answers by status {sorted(answered.items())}")
    assert any(400 <= status < 500 for status in answered), answered  # the forms were refused, not just passed


async def _signed_in(client: httpx.AsyncClient, token: str) -> str:
    """Sign the client in; the session's CSRF token."""
    form = await client.get("/console/login")
    done = await client.post("/console/login", data={"csrf": csrf_of(form), "token": token})
    assert done.status_code == 303, done.text
    return csrf_of(await client.get("/console/runs"))


async def test_a_201_character_token_shows_the_sign_in_form_again_with_422_naming_the_field(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with site(db_url, tmp_path) as s:
        pasted = "tiq_" + "A" * 197
        form = await s.client.get("/console/login?next=/console/jobs")
        refused = await s.client.post("/console/login", data={"csrf": csrf_of(form), "token": pasted,
                                                              "next": "/console/jobs"})  # fmt: skip
        assert refused.status_code == 422, refused.text
        assert "<code>body.token</code>: token is longer than 200 characters" in refused.text
        assert 'name="token"' in refused.text and 'value="/console/jobs"' in refused.text  # the form, again
        assert "A" * 50 not in refused.text  # the token is never echoed
        # Sent again from that form, a right token signs in.
        token = await s.h.token("oncall", "operator")
        again = await s.client.post("/console/login", data={"csrf": csrf_of(refused), "token": token,
                                                            "next": "/console/jobs"})  # fmt: skip
        assert again.status_code == 303 and again.headers["location"] == "/console/jobs", again.text
        # Every other refusal of the sign-in form shows it again too, naming the field; each is sent from
        # the form the last one showed (its CSRF cookie is that form's).
        async with httpx.AsyncClient(verify=TLS, base_url=s.base, timeout=30) as fresh:
            answer = await fresh.get("/console/login")
            refusals = [({"token": token}, 403, "body.csrf"), ({"token": "tiq_\x00"}, 422, "body.token"),
                        ({"token": "tiq_" + "x" * 43}, 401, "body.token")]  # fmt: skip
            for sent, status, field in refusals:
                data = sent if field == "body.csrf" else {**sent, "csrf": csrf_of(answer)}
                answer = await fresh.post("/console/login", data=data)
                assert answer.status_code == status, (data, answer.text)
                assert f"<code>{field}</code>" in answer.text and 'name="token"' in answer.text
    assert len(await read_rows(db_url, "SELECT 1 FROM console_sessions")) == 1
    no_traceback(caplog.records)


async def test_a_refused_field_shows_the_page_of_its_form_again_naming_the_field(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_kinds.register(monkeypatch)
    async with site(db_url, tmp_path, job_concurrency=0) as s:
        token = await s.h.token("oncall", "operator")
        asker = await s.run_waiting(token, "asker")
        held = await s.run_waiting(token, "a")
        approval = (await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", held))[0]["id"]
        question = (await read_rows(db_url, "SELECT id FROM inputs WHERE run_id = %s", asker))[0]["id"]
        job = await s.h.process.jobs.queue.submit("count", {"to": 3}, "ops")
        async with s.sign_in(token) as client:
            csrf = csrf_of(await client.get("/console/runs"))
            cases = [
                (f"/console/runs/{asker}/input", {"csrf": csrf, "text": "x" * 100_001, "question_id": str(question)},
                 422, "body.text", f'action="/console/runs/{asker}/input"'),
                (f"/console/runs/{asker}/input", {"csrf": csrf, "text": "staging", "question_id": "no"},
                 422, "body.question_id", f'action="/console/runs/{asker}/input"'),
                (f"/console/runs/{asker}/stop", {}, 403, "body.csrf", f'action="/console/runs/{asker}/stop"'),
                (f"/console/approvals/{approval}", {"csrf": csrf, "decision": "maybe", "back": "/console/approvals"},
                 422, "body.decision", f'action="/console/approvals/{approval}"'),
                (f"/console/approvals/{approval}", {"csrf": csrf, "decision": "approve", "reason": "r" * 2001,
                                                    "back": f"/console/runs/{held}"},
                 422, "body.reason", f'<div id="run" data-run="{held}"'),
                (f"/console/jobs/{job.id}/cancel", {"csrf": "x"}, 403, "body.csrf",
                 f'action="/console/jobs/{job.id}/cancel"'),
            ]  # fmt: skip
            for path, data, status, field, form in cases:
                answer = await client.post(path, data=data)
                assert answer.status_code == status, (path, data.keys(), answer.text[:500])
                assert f'role="alert"><code>{field}</code>: ' in answer.text, (path, field)
                assert form in answer.text, (path, form)  # the page of the form, the form on it
        rows = await read_rows(db_url, "SELECT (SELECT status FROM approvals) AS a, (SELECT status FROM inputs) AS i, "
                                       "(SELECT status FROM jobs) AS j")  # fmt: skip
        assert rows == [{"a": "pending", "i": "pending", "j": "queued"}]  # nothing was changed
