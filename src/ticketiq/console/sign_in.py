"""`/console/login` (GET the form, POST a pasted token) and `/console/logout` (POST)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from ticketiq.auth import tokens
from ticketiq.console import sessions, web
from ticketiq.console.web import FormRefused, Refusal, Signed
from ticketiq.engine.engine import Engine
from ticketiq.storage.token_store import TokenStore

UNKNOWN = "that token is unknown or revoked: paste a token `ticketiq tokens create` made"
NOT_KNOWN = Refusal(401, UNKNOWN, "body.token")
PASTED_MAX = 200  # a token is 47 characters; room for what a paste brings around it, no more


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def token_store(request: Request) -> TokenStore:
        store: TokenStore = request.app.state.tokens
        return store

    def form_page(request: Request, refusal: Refusal | None = None, back_to: str | None = None) -> Response:
        """The form, again with a refusal when a POST was refused. Its CSRF token: a fresh secret in a
        cookie of its own and in the form (double submit); no session exists yet to hold one."""
        login_csrf = sessions.new_secret()
        notice = web.NOTICES.get(request.query_params.get("done", ""))
        page = web.render(request, "login.html", 200, None, refusal, login_csrf=login_csrf, notice=notice,
                          next=sessions.safe_next(back_to or request.query_params.get("next")))  # fmt: skip
        secure = sessions.secure_cookie(request.url.scheme)
        page.set_cookie(sessions.LOGIN_COOKIE, login_csrf, max_age=sessions.LOGIN_COOKIE_S, path="/console/login",
                        httponly=True, samesite="strict", secure=secure)  # fmt: skip
        return page

    @router.get("/console", include_in_schema=False)
    async def home() -> RedirectResponse:
        return RedirectResponse(sessions.HOME, status_code=303)

    @router.get("/console/login", include_in_schema=False)
    async def login_form(request: Request) -> Response:
        if await sessions.current(request) is not None:
            return RedirectResponse(sessions.safe_next(request.query_params.get("next")), status_code=303)
        return form_page(request)

    @router.post("/console/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        # Nothing of the token is logged or echoed: a refusal shows the form again, empty, naming the field.
        back_to = None
        try:
            form = await web.checked_form(request, request.cookies.get(sessions.LOGIN_COOKIE))
            sent_next = form.get("next")
            back_to = sessions.safe_next(sent_next if isinstance(sent_next, str) else None)
            token = web.text_field(form, "token", required=False, max_length=PASTED_MAX)
        except FormRefused as refused:
            return form_page(request, refused.refusal, back_to)
        if not tokens.well_formed(token):
            return form_page(request, NOT_KNOWN, back_to)
        found = await token_store(request).credential(tokens.token_hash(token))
        if found is None or not tokens.matches(token, found.token_hash):
            return form_page(request, NOT_KNOWN, back_to)
        session_id, csrf = sessions.new_secret(), sessions.new_secret()
        ttl_s = engine(request).deps.settings.console_session_ttl_s
        expires = await sessions.store_of(request).start(sessions.id_hash(session_id), found.name, csrf, ttl_s)
        if expires is None:  # revoked between the lookup and the session
            return form_page(request, NOT_KNOWN, back_to)
        answer = RedirectResponse(back_to, status_code=303)
        answer.set_cookie(sessions.COOKIE, session_id, max_age=int(ttl_s), path="/", httponly=True,
                          samesite="strict", secure=sessions.secure_cookie(request.url.scheme))  # fmt: skip
        answer.delete_cookie(sessions.LOGIN_COOKIE, path="/console/login")
        return answer

    @router.post("/console/logout", include_in_schema=False)
    async def logout(request: Request, session: Signed) -> Response:
        try:
            await web.checked_form(request, session.csrf)
        except FormRefused as refused:  # the sign-out form is in the refusal page's header
            return web.refused(request, session, refused.refusal)
        await sessions.store_of(request).end(session.id_hash)
        answer = RedirectResponse("/console/login?done=signed_out", status_code=303)
        answer.delete_cookie(sessions.COOKIE, path="/", httponly=True, samesite="strict",
                             secure=sessions.secure_cookie(request.url.scheme))  # fmt: skip
        return answer
