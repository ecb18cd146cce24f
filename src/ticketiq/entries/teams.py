"""The Teams entry point: `POST /v1/teams/messages` takes Bot Framework activities into the durable
inbox; `GET /v1/teams/inbox` (an operator's token) lists the inbox with what became of each turn.

The messages route is not ours to authenticate (`BearerAuth` lets it through): every activity carries
the Bot Framework's `Authorization: Bearer <JWT>`, verified before anything is read into the inbox:

- its signature, RS256 by a key of the token service's key set (TICKETIQ_TEAMS_JWKS_URL). PyJWKClient
  keeps the set for 5 minutes and fetches it again for an unknown key id at most every 30 s; its fetch
  blocks, so every lookup runs in a worker thread (`asyncio.to_thread`), never on the event loop;
- its issuer (TICKETIQ_TEAMS_ISSUER), audience (TICKETIQ_TEAMS_APP_ID) and expiry, with 5 minutes of
  leeway for clock skew (checked by PyJWT and by `auth/bot_tokens.py`'s pure rules);
- the signing key's `endorsements` in the key set must include the activity's `channelId`, as the Bot
  Framework SDKs check (`bot_tokens.endorsement_refusal`: a key without the field is not checked);
- the activity's `serviceUrl` must be the token's `serviceurl` claim: the reply goes there.

A missing, malformed, badly signed, expired or misdirected token, or a serviceUrl the token does not
name: 401, nothing stored. A verified token with an activity that does not parse: 422 naming the
field, nothing stored. The key set unreachable, or the inbox not configured: 503 (Teams delivers
again). A message is stored and its turn started (`intake/teams_turns.py`), then acknowledged at once:
201 (200 for a redelivery or a duplicate, which store and start nothing). Activities other than
messages (conversationUpdate, typing, ...) are acknowledged and ignored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Annotated, Any

import jwt
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ticketiq.auth import bot_tokens, tokens
from ticketiq.auth.bot_tokens import ALGORITHM, Expected
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires
from ticketiq.errors import RequestError
from ticketiq.intake import teams_inbox
from ticketiq.intake.teams_inbox import Intake
from ticketiq.intake.teams_turns import InboxEntry, NotConfigured, TeamsTurns
from ticketiq.settings import Settings
from ticketiq.storage.teams_store import InboxRow

log = logging.getLogger(__name__)

MESSAGES = "/v1/teams/messages"
JWKS_KEPT_S = 300.0
JWKS_TIMEOUT_S = 5.0
_CHALLENGE = 'Bearer realm="botframework", error="invalid_token"'


class KeysUnavailable(RequestError):
    """The token service's key set could not be fetched: no activity can be verified now."""

    status = 503


class Unauthenticated(Exception):
    """The activity's Bot Framework token is refused; the message says why."""


# ----- the activity, as far as the inbox reads it (Bot Framework Activity schema) --------------------------


class Account(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=512)
    name: str | None = Field(default=None, max_length=512)
    aadObjectId: str | None = Field(default=None, min_length=1, max_length=128)


class Conversation(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = Field(min_length=1, max_length=1024)


class Message(BaseModel):
    """A `message` activity; other fields ride along untouched."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    type: str
    id: str = Field(min_length=1, max_length=256)
    serviceUrl: str = Field(min_length=1, max_length=2048, pattern=r"^https?://")
    channelId: str = Field(pattern=r"^msteams$")
    sender: Account = Field(alias="from")
    conversation: Conversation
    text: str | None = Field(default=None, max_length=100_000)
    replyToId: str | None = Field(default=None, max_length=256)
    channelData: dict[str, Any] | None = None
    value: Any = None


class Acknowledged(BaseModel):
    status: str = Field(
        description="received, redelivered, duplicate, unstarted (its run made now), refused or ignored"
    )
    activity_id: str | None = None
    inbox_id: int | None = None
    run_id: str | None = None
    duplicate_of: str | None = Field(default=None, description="The activity a content duplicate repeats.")


# ----- the Bot Framework token ---------------------------------------------------------------------------


class EndorsedKeys(jwt.PyJWKClient):
    """PyJWKClient that keeps, from each fetch of the key set, every key's `endorsements` (a PyJWK keeps
    no field it does not use). Kept as the fetch happens, under the client's lock that every key lookup
    takes, so a key found is never newer than its endorsements; merged, so a key dropped by a later
    fetch does not lose them while a token it signed is being checked."""

    def __init__(self, uri: str, **options: Any) -> None:
        super().__init__(uri, **options)
        self.endorsed: dict[str, Any] = {}

    def fetch_data(self) -> Any:
        data = super().fetch_data()
        self.endorsed = {**self.endorsed, **bot_tokens.endorsements(data)}
        return data


class BotFrameworkTokens:
    """Verifies activities' tokens against the token service's keys (one per app: its key set cache)."""

    def __init__(self, settings: Settings) -> None:
        app_id = settings.teams_app_id
        self.expected = None if not app_id else Expected(settings.teams_issuer, app_id)
        self.keys = EndorsedKeys(settings.teams_jwks_url, lifespan=JWKS_KEPT_S, timeout=JWKS_TIMEOUT_S)

    async def claims(self, authorization: str | None, channel_id: str | None = None) -> dict[str, Any]:
        """The verified token's claims, for an activity of `channel_id`; Unauthenticated, NotConfigured or
        KeysUnavailable."""
        token = tokens.bearer(authorization)
        if token is None:
            raise Unauthenticated("no bearer token: the Bot Framework sends `Authorization: Bearer <JWT>`")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated("the bearer token is not a JWT") from exc
        if self.expected is None:
            raise NotConfigured("settings.TICKETIQ_TEAMS_APP_ID", "TICKETIQ_TEAMS_APP_ID is unset: the Teams "
                                "inbox takes no activity until it names the bot's Microsoft App ID")  # fmt: skip
        if header.get("alg") != ALGORITHM:
            raise Unauthenticated(f"the token is signed with {header.get('alg')!r}; only {ALGORITHM} is taken")
        try:
            key = await asyncio.to_thread(self.keys.get_signing_key_from_jwt, token)
        except jwt.PyJWKClientConnectionError as exc:
            log.error("the Bot Framework key set could not be fetched: %s", exc)
            raise KeysUnavailable("header.Authorization", "the token service's signing keys could not be "
                                  "fetched (TICKETIQ_TEAMS_JWKS_URL); deliver again later") from exc  # fmt: skip
        except (jwt.PyJWKClientError, jwt.PyJWKError, jwt.InvalidTokenError) as exc:
            raise Unauthenticated(f"no signing key of the token service matches the token ({exc})") from exc
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key.key, algorithms=[ALGORITHM], audience=self.expected.audience,
                issuer=self.expected.issuer, leeway=self.expected.leeway_s,
                options={"require": ["exp", "iss", "aud"]},
            )  # fmt: skip
        except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError, jwt.DecodeError) as exc:
            raise Unauthenticated(f"the token does not verify: {exc}") from exc
        except jwt.InvalidTokenError as exc:
            # Signed by the service, refused for a claim: said in the words of the pure rules.
            raise Unauthenticated(self._claims_refusal(token, key.key) or f"the token does not verify: {exc}") from exc
        refusal = bot_tokens.token_refusal(claims, self.expected, time.time()) or bot_tokens.endorsement_refusal(
            key.key_id, self.keys.endorsed, channel_id
        )
        if refusal is not None:
            raise Unauthenticated(refusal)
        return claims

    def _claims_refusal(self, token: str, key: Any) -> str | None:
        """Why a token the service signed is refused for its claims, by the pure rules."""
        assert self.expected is not None
        signed: dict[str, Any] = jwt.decode(token, key, algorithms=[ALGORITHM], options={
            "verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False, "verify_iss": False,
        })  # fmt: skip
        return bot_tokens.token_refusal(signed, self.expected, time.time())


def _unauthenticated(why: str) -> JSONResponse:
    body = {"detail": [{"loc": ["header", "Authorization"], "msg": f"Bot Framework token refused: {why}"}]}
    return JSONResponse(body, status_code=401, headers={"WWW-Authenticate": _CHALLENGE})


def _invalid(field: str, message: str) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": field.split("."), "msg": message}]}, status_code=422)


def _verifier(request: Request, engine: Engine) -> BotFrameworkTokens:
    found: BotFrameworkTokens | None = getattr(request.app.state, "bot_framework_tokens", None)
    if found is None:
        try:
            found = BotFrameworkTokens(engine.deps.settings)
        except jwt.PyJWKClientError as exc:  # a key set URL that is not http(s)
            raise NotConfigured(
                "settings.TICKETIQ_TEAMS_JWKS_URL", f"TICKETIQ_TEAMS_JWKS_URL is not usable: {exc}"
            ) from exc
        request.app.state.bot_framework_tokens = found
    return found


async def _activity(request: Request) -> dict[str, Any] | JSONResponse:
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _invalid("body", "an activity is a JSON object; this body is not JSON")
    if not isinstance(body, dict):
        return _invalid("body", "an activity is a JSON object")
    if not isinstance(body.get("type"), str):
        return _invalid("body.type", "an activity names its type (a string)")
    return body


def _row(message: Message, raw: dict[str, Any], app_url: str) -> InboxRow | JSONResponse:
    text = teams_inbox.turn_input(message.text, message.value)
    if not text:
        return _invalid("body.text", "the message holds no text (and no card value) for the agent")
    team = (message.channelData or {}).get("team")
    team_id = team.get("aadGroupId") if isinstance(team, dict) else None
    return InboxRow(
        activity_id=message.id, conversation_id=message.conversation.id,
        content_hash=teams_inbox.content_hash(message.conversation.id, message.replyToId, message.sender.id,
                                              message.text or "", message.value),
        run_key=teams_inbox.run_key(message.conversation.id, message.id), service_url=message.serviceUrl,
        team_id=team_id if isinstance(team_id, str) and team_id else None, from_id=message.sender.id,
        from_name=message.sender.name, actor=teams_inbox.actor(message.sender.id, message.sender.aadObjectId),
        text=text, app_url=app_url, activity=raw,
    )  # fmt: skip


def _entry(entry: InboxEntry) -> dict[str, Any]:
    return {
        "id": entry.id, "activity_id": entry.activity_id, "conversation": entry.conversation_id,
        "from": {"id": entry.from_id, "name": entry.from_name}, "text": entry.text,
        "received_at": entry.received_at, "run_id": entry.run_id, "status": entry.status.value,
        "reason": entry.reason,
    }  # fmt: skip


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    @router.post(
        MESSAGES,
        status_code=201,
        response_model=Acknowledged,
        responses={
            200: {"model": Acknowledged, "description": "A redelivery, a duplicate or another activity type."},
            401: {"description": "The Bot Framework token is missing, invalid or does not name the serviceUrl."},
        },
    )
    async def receive(request: Request) -> Response:
        """A Bot Framework activity (authenticated by its own JWT, not by our tokens)."""
        eng = engine(request)
        try:
            claims = await _verifier(request, eng).claims(request.headers.get("authorization"),
                                                          _channel_id(await request.body()))  # fmt: skip
        except Unauthenticated as refused:
            log.info("a Teams activity was refused: %s", refused)
            return _unauthenticated(str(refused))
        raw = await _activity(request)
        if isinstance(raw, JSONResponse):
            return raw
        if raw["type"] != "message":
            return JSONResponse(Acknowledged(status="ignored", activity_id=_text(raw.get("id"))).model_dump())
        try:
            message = Message.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            return _invalid(".".join(["body", *(str(p) for p in first["loc"])]), first["msg"])
        refusal = bot_tokens.service_url_refusal(claims, message.serviceUrl)
        if refusal is not None:
            log.info("a Teams activity was refused: %s", refusal)
            return _unauthenticated(refusal)
        row = _row(message, raw, str(request.base_url).rstrip("/"))
        if isinstance(row, JSONResponse):
            return row
        got = await TeamsTurns(eng).receive(row)
        shown = Acknowledged(status=got.intake.value, activity_id=message.id, inbox_id=got.row_id, run_id=got.run_id,
                             duplicate_of=got.duplicate_of)  # fmt: skip
        return JSONResponse(shown.model_dump(), status_code=201 if got.intake is Intake.NEW else 200)

    @router.get("/v1/teams/inbox")
    async def inbox(
        request: Request,
        _: Annotated[Principal, Depends(requires(Permission.READ_EVERY_RUN))],
        before: Annotated[int | None, Query(ge=1, le=2**62, description="Rows older than this id.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """The inbox, newest first: each activity and its turn (received, running, replied, or failed with
        the reason)."""
        entries = await TeamsTurns(engine(request)).entries(before, limit)
        return {"entries": [_entry(e) for e in entries], "before": entries[-1].id if len(entries) == limit else None}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _channel_id(body: bytes) -> str | None:
    """The channel the activity says it is of, for the endorsement check before anything else is read;
    None when the body does not say (it is then refused for its shape, once the token verified)."""
    try:
        activity = json.loads(body)
    except (ValueError, RecursionError):  # too deep: text_guard refuses such a body before any route
        return None
    return _text(activity.get("channelId")) if isinstance(activity, dict) else None
