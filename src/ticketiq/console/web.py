"""What every console page shares: the templates (autoescaped, all of them), the response headers, the
session a page requires, the checked form of a POST, and the page a refusal gets.

Untrusted text (model answers, Jira text, tool results, inputs) reaches a page only through Jinja2's
autoescape, and every console response forbids inline script (CSP `script-src 'self'`): a payload that
slipped through escaping would still not run. Inline styles are refused too; bar widths are SVG
attributes, which CSP does not govern.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import jinja2
from fastapi import Depends, Request
from starlette.datastructures import FormData, MutableHeaders
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission
from ticketiq.console import sessions, views
from ticketiq.console.sessions import Session
from ticketiq.errors import RequestError
from ticketiq.values.storable import is_storable

HERE = Path(__file__).parent
PREFIX = "/console"
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # every template, whatever its name
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.globals.update(
    duration=views.duration, clock=views.clock, clock_of_day=views.clock_of_day, tone=views.status_tone,
    seconds_between=views.seconds_between,
    transcript_text=views.transcript_text, CSRF_FIELD=sessions.CSRF_FIELD,
)  # fmt: skip


class SecurityHeaders:
    """Pure ASGI middleware: the headers above on every response under /console."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, sending)


def is_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


class SignInNeeded(Exception):
    """A console page asked for without a session: the answer is the sign-in page. `cross_site`: the
    browser came from another site (a Teams card's link), so it sent no SameSite=Strict cookie at all."""

    def __init__(self, back_to: str, cross_site: bool = False) -> None:
        super().__init__(back_to)
        self.back_to = back_to
        self.cross_site = cross_site


def to_sign_in(request: Request, exc: SignInNeeded) -> Response:
    if exc.cross_site and request.method == "GET":
        # Asked once more from this site, the browser sends the session cookie it holds; with none,
        # that request (same-origin now) goes to the sign-in page. A refresh is no script: CSP allows it.
        return render(request, "again.html", 200, None, again=sessions.safe_next(exc.back_to))
    return RedirectResponse(f"{PREFIX}/login?next={quote(exc.back_to, safe='/')}", status_code=303)


async def signed_in(request: Request) -> Session:
    session = await sessions.current(request)
    if session is None:
        back = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInNeeded(back, request.headers.get("sec-fetch-site") == "cross-site")
    return session


Signed = Annotated[Session, Depends(signed_in)]


def render(request: Request, template: str, code: int = 200, session: Session | None = None,
           refusal: Refusal | None = None, **values: Any) -> HTMLResponse:  # fmt: skip
    """A page; with `refusal`, the page of a form whose POST was refused, shown again with the refusal's
    status and, above the form, what was refused and the field."""
    values.setdefault("notice", NOTICES.get(request.query_params.get("done", "")))
    page = TEMPLATES.get_template(template).render(
        request=request, session=session, me=session.principal if session else None, path=request.url.path,
        may=(lambda p: session is not None and tokens.may(session.principal.role, p)), Permission=Permission,
        refusal=refusal, **values,
    )  # fmt: skip
    return HTMLResponse(page, status_code=refusal.status if refusal else code)


def refused(request: Request, session: Session | None, refusal: Refusal) -> Response:
    """The page a refused request gets when it has no form to show again (no such run, a role that may
    not): what was refused and why, with a way back."""
    return render(request, "refused.html", refusal.status, session, status=refusal.status, message=refusal.message,
                  field=refusal.field, back=_same_site_path(request))  # fmt: skip


def failed(request: Request, status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """The page of a console request that failed (a 404 of no route, a 500, a 503 of the database), with
    the console's headers set here too: a 500 is answered outside the middleware that sets them. It says
    nothing of the error itself (that is in the process's log) and looks up no session: the database may
    be what failed."""
    page = render(request, "refused.html", status, None, status=status, message=message, field=None,
                  back=_same_site_path(request))  # fmt: skip
    page.headers.update({**HEADERS, **(headers or {})})
    return page


def _same_site_path(request: Request) -> str:
    """Where the refused request came from, when that was a console page of this site."""
    referer = urlsplit(request.headers.get("referer") or "")
    if referer.netloc == request.url.netloc and is_console(referer.path):
        return referer.path + (f"?{referer.query}" if referer.query else "")
    return "/console/runs"


@dataclass(frozen=True)
class Refusal:
    """Why a form's POST was refused: a 4xx, what to do, and the field at fault (`body.token`)."""

    status: int
    message: str
    field: str | None = None

    @classmethod
    def of(cls, error: RequestError) -> Refusal:
        return cls(error.status, error.message, error.field)


class FormRefused(Exception):
    """A posted field refused before anything was read or written; its page shows the form again."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.refusal = Refusal(status, message, field)


async def checked_form(request: Request, expected_csrf: str | None) -> FormData:
    """The posted form once its CSRF token matched (403 otherwise, before anything is read or written),
    every field storable text (I16: 422 naming it)."""
    form = await request.form()
    files = [name for name, value in form.multi_items() if not isinstance(value, str)]
    if files:
        await form.close()  # the upload's temporary files go at once, whatever is refused first
    sent = form.get(sessions.CSRF_FIELD)
    if not sessions.csrf_ok(sent if isinstance(sent, str) else None, expected_csrf):
        raise FormRefused(403, "this form's CSRF token is missing or wrong: reload the page and send it again",
                          f"body.{sessions.CSRF_FIELD}")  # fmt: skip
    if files:
        raise FormRefused(422, "the console takes no files", f"body.{files[0]}")
    for name, value in form.multi_items():
        assert isinstance(value, str)  # files were refused above
        if not is_storable(name) or not is_storable(value):
            raise FormRefused(422, "holds text that cannot be stored (a NUL character or an unpaired surrogate); "
                              "remove it", f"body.{name}")  # fmt: skip
    return form


def text_field(form: FormData, name: str, *, required: bool, max_length: int) -> str:
    """A posted text field, stripped; FormRefused (422 naming it) when required and empty, or too long."""
    value = form.get(name)
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise FormRefused(422, f"{name} is required", f"body.{name}")
    if len(text) > max_length:
        raise FormRefused(422, f"{name} is longer than {max_length} characters", f"body.{name}")
    return text


def after_post(target: str, done: str) -> RedirectResponse:
    """Post/Redirect/Get: the page again, saying what was done (a word of our own, never posted text)."""
    joiner = "&" if "?" in target else "?"
    return RedirectResponse(f"{target}{joiner}done={quote(done)}", status_code=303)


NOTICES: Mapping[str, str] = {
    "stopped": "Stop requested: a waiting or queued run ends at once, a running one at its next step.",
    "input": "Input given: the run goes on.",
    "approved": "Approved: the run goes on with the call.",
    "rejected": "Rejected: the run goes on without the call.",
    "cancelled": "Cancel requested.",
    "restarted": "Restarted as a new job.",
    "signed_out": "Signed out.",
}
