"""incident.io v2 stand-in: create (deduped on `idempotency_key` for ever), list, get, edit.

Fixed catalogue: severities `sev_critical`, `sev_major`, `sev_minor` (`GET /v1/severities`) and
statuses `st_triage`, `st_investigating`, `st_fixing`, `st_monitoring`, `st_closed`
(`GET /v1/incident_statuses`). A new incident is `Investigating` (live) unless told otherwise.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter, Request, Response

from ticketiq.standins.records import Answer, Effect, Row, Session, Write, iso
from ticketiq.standins.vendors.intake import IntakeDep, has_auth, json_body

VENDOR = "incidentio"

SEVERITIES = [
    {"id": "sev_critical", "name": "Critical", "rank": 1},
    {"id": "sev_major", "name": "Major", "rank": 2},
    {"id": "sev_minor", "name": "Minor", "rank": 3},
]
STATUSES = [
    {"id": "st_triage", "name": "Triage", "category": "triage", "rank": 1},
    {"id": "st_investigating", "name": "Investigating", "category": "live", "rank": 2},
    {"id": "st_fixing", "name": "Fixing", "category": "live", "rank": 3},
    {"id": "st_monitoring", "name": "Monitoring", "category": "live", "rank": 4},
    {"id": "st_closed", "name": "Closed", "category": "closed", "rank": 5},
]
_SEVERITY = {s["id"]: s for s in SEVERITIES}
_STATUS = {s["id"]: s for s in STATUSES}
MODES = ("standard", "retrospective", "test", "tutorial")
_LISTED_BY_DEFAULT = ["standard", "retrospective"]


def router() -> APIRouter:
    api = APIRouter()

    @api.get("/v1/severities")
    async def severities(intake: IntakeDep) -> Response:
        return await intake.read(VENDOR, "list_severities", _answer({"severities": SEVERITIES}))

    @api.get("/v1/incident_statuses")
    async def statuses(intake: IntakeDep) -> Response:
        return await intake.read(VENDOR, "list_statuses", _answer({"incident_statuses": STATUSES}))

    @api.post("/v2/incidents")
    async def create(request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        key = body.get("idempotency_key") if isinstance(body, dict) else None
        write = Write(VENDOR, "create_incident", "incidents", key if isinstance(key, str) else None, body)
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _error(401, "authentication_error", "No API key was given", None)
            problem = _create_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            assert isinstance(key, str)
            claim = await session.claim(VENDOR, "incidents", key, _new_id(), float("inf"), body)
            if not claim.won:
                return await _repeat(session, claim.ref, intake.options.incidentio_repeat)
            row = await session.fetch_one(
                "standin.incident_insert",
                {
                    "id": claim.ref,
                    "name": body.get("name") or "Untitled incident",
                    "summary": body.get("summary"),
                    "severity_id": body.get("severity_id"),
                    "status_id": body.get("incident_status_id") or "st_investigating",
                    "mode": body.get("mode") or "standard",
                    "visibility": body["visibility"],
                },
            )
            assert row is not None
            return Answer(201, {"incident": _incident(row)}, Effect.APPLIED, claim.ref)

        return await intake.write(write, apply)

    @api.get("/v2/incidents")
    async def list_incidents(request: Request, intake: IntakeDep) -> Response:
        async def answer() -> Answer:
            query = request.query_params
            modes = [m for v in query.getlist("mode[one_of]") for m in v.split(",") if m] or _LISTED_BY_DEFAULT
            try:
                page_size = min(int(query.get("page_size", "25")), 250)
                gte = query.get("created_at[gte]")
                created_gte = datetime.fromisoformat(gte) if gte else None
            except ValueError as exc:
                return _error(422, "validation_error", f"Invalid query parameter: {exc}", "query")
            rows = await intake.store.fetch_all(
                "standin.incident_list",
                {"modes": modes, "created_gte": created_gte, "after": query.get("after"), "limit": page_size},
            )
            after = rows[-1]["id"] if len(rows) == page_size else None
            return Answer(
                200,
                {
                    "incidents": [_incident(r) for r in rows],
                    "pagination_meta": {"after": after, "page_size": page_size},
                },
            )

        return await intake.read(VENDOR, "list_incidents", answer)

    @api.get("/v2/incidents/{incident_id}")
    async def get_incident(incident_id: str, intake: IntakeDep) -> Response:
        async def answer() -> Answer:
            row = await intake.store.fetch_one("standin.incident_get", {"id": incident_id})
            if row is None:
                return _error(404, "not_found", "Incident not found", None)
            return Answer(200, {"incident": _incident(row)})

        return await intake.read(VENDOR, "get_incident", answer)

    @api.post("/v2/incidents/{incident_id}/actions/edit")
    async def edit(incident_id: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        write = Write(VENDOR, "edit_incident", incident_id, None, body)
        authed = has_auth(request)

        async def apply(session: Session) -> Answer:
            if not authed:
                return _error(401, "authentication_error", "No API key was given", None)
            problem = _edit_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            fields = body["incident"]
            row = await session.fetch_one(
                "standin.incident_edit",
                {
                    "id": incident_id,
                    "name": fields.get("name"),
                    "summary": fields.get("summary"),
                    "severity_id": fields.get("severity_id"),
                    "status_id": fields.get("incident_status_id"),
                },
            )
            if row is None:
                return _error(404, "not_found", "Incident not found", None)
            return Answer(200, {"incident": _incident(row)}, Effect.APPLIED, incident_id)

        return await intake.write(write, apply)

    return api


def _answer(body: Any) -> Callable[[], Awaitable[Answer]]:
    async def answer() -> Answer:
        return Answer(200, body)

    return answer


async def _repeat(session: Session, incident_id: str, repeat: str) -> Answer:
    if repeat == "error":
        return _error(
            409,
            "conflict",
            "An incident was already created with this idempotency key",
            "idempotency_key",
            Effect.DEDUPED,
        )
    row = await session.fetch_one("standin.incident_get", {"id": incident_id})
    assert row is not None  # claimed in the same transaction that inserted it
    return Answer(201, {"incident": _incident(row)}, Effect.DEDUPED, incident_id)


def _create_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict):
        return _error(422, "validation_error", "Request body must be a JSON object", None)
    if not isinstance(body.get("idempotency_key"), str) or not body["idempotency_key"]:
        return _error(422, "validation_error", "idempotency_key is required", "idempotency_key")
    if body.get("visibility") not in ("public", "private"):
        return _error(422, "validation_error", "visibility must be one of public, private", "visibility")
    mode = body.get("mode") or "standard"
    if mode not in MODES:
        return _error(422, "validation_error", f"mode must be one of {', '.join(MODES)}", "mode")
    status = body.get("incident_status_id") or "st_investigating"
    if status not in _STATUS:
        return _error(422, "validation_error", "No incident status with this id", "incident_status_id")
    severity = body.get("severity_id")
    if severity is not None and severity not in _SEVERITY:
        return _error(422, "validation_error", "No severity with this id", "severity_id")
    active = _STATUS[status]["category"] == "live" and mode != "retrospective"
    if severity is None and active:
        return _error(422, "validation_error", "A severity is required for an active incident", "severity_id")
    return None


def _edit_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict) or not isinstance(body.get("incident"), dict):
        return _error(422, "validation_error", "incident is required", "incident")
    if not isinstance(body.get("notify_incident_channel"), bool):
        return _error(422, "validation_error", "notify_incident_channel is required", "notify_incident_channel")
    fields = body["incident"]
    if fields.get("severity_id") is not None and fields["severity_id"] not in _SEVERITY:
        return _error(422, "validation_error", "No severity with this id", "incident.severity_id")
    if fields.get("incident_status_id") is not None and fields["incident_status_id"] not in _STATUS:
        return _error(422, "validation_error", "No incident status with this id", "incident.incident_status_id")
    return None


def _error(status: int, kind: str, message: str, field: str | None, effect: Effect = Effect.REFUSED) -> Answer:
    error: dict[str, Any] = {"code": kind, "message": message}
    if field is not None:
        error["source"] = {"field": field}
    body = {"type": kind, "status": status, "request_id": str(uuid.uuid4()), "errors": [error]}
    return Answer(status, body, effect)


def _new_id() -> str:
    # ULID-shaped: sortable by time, unique by its random tail.
    return f"{int(time.time() * 1000):013X}{secrets.token_hex(7).upper()}"[:26]


def _incident(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "reference": f"INC-{row['seq']}",
        "name": row["name"],
        "summary": row["summary"],
        "mode": row["mode"],
        "visibility": row["visibility"],
        "severity": _SEVERITY.get(row["severity_id"]) if row["severity_id"] else None,
        "incident_status": _STATUS[row["status_id"]],
        "permalink": f"https://app.incident.io/standin/incidents/{row['seq']}",
        "created_at": iso(row["created_at"]),
        "updated_at": iso(row["updated_at"]),
    }
