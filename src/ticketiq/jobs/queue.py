"""What the API does with jobs: make one (its kind's params checked), read, cancel, restart. Each is
one statement of the job store; refusals are RequestErrors naming the field, nothing half written."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ticketiq.errors import Conflict, NotFound, RequestError
from ticketiq.jobs import kinds
from ticketiq.storage.job_store import JobRow, JobStore

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine


# The namespace of job ids derived from a request's Idempotency-Key (uuid5 of the token and the key).
KEYED_JOBS = uuid.UUID("6f1d4c52-3b7e-4a47-9a0e-2f4b8c1d9e73")


def job_id(by: str, key: str | None) -> str:
    """A fresh id, or for a keyed request one derived from the token's name and the key: the same
    request, however often sent, names the same job."""
    return str(uuid.uuid4() if key is None else uuid.uuid5(KEYED_JOBS, f"{by}\n{key}"))


class JobQueue:
    def __init__(self, engine: Engine, wake: Callable[[], None]) -> None:
        self.engine = engine
        self.store = JobStore(engine.deps.db)
        self.wake = wake  # this process's worker looks at once

    async def submit(
        self, kind_name: str, params: Mapping[str, Any], by: str, *, internal: bool = False, key: str | None = None
    ) -> JobRow:
        """A queued job of `kind_name` made by the token `by`. `internal`: for the route of an internal
        kind (a workflow run), which `POST /v1/jobs` may not make. `key` (the route and the request's
        Idempotency-Key): the job's id derives from it and the token, so a request sent again after its
        process died between making the job and storing the key's answer finds that job, not a second."""
        kind = kinds.kind(kind_name)  # 422 body.kind
        if kind.internal and not internal:
            raise RequestError("body.kind", f"{kind.name} jobs are made by their own route, not POST /v1/jobs")
        checked = kind.check(params, self.engine)  # 422 body.params.<field>
        made = await self.store.create(job_id(by, key), kind.name, checked, kind.resumable, by)
        self.wake()
        return made

    async def get(self, job_id: str) -> JobRow:
        found = await self.store.get(job_id)
        if found is None:
            raise NotFound("path.job_id", f"no job {job_id}")
        return found

    async def listed(self, status: str | None, kind: str | None, limit: int) -> list[JobRow]:
        return await self.store.listed(status, kind, limit)

    async def cancel(self, job_id: str, by: str) -> JobRow:
        """A queued job is cancelled at once; a running one is asked to stop (it ends `cancelled` at its
        next save). A job already cancelled is answered as it is; any other ended job is a 409."""
        asked = await self.store.cancel(job_id, by)
        if asked is not None:
            return asked
        # I20: a repeat of a cancel whose answer was lost is answered "cancelled" from this row.
        found = await self.store.found(job_id)
        if found is None:
            raise NotFound("path.job_id", f"no job {job_id}")
        if found.status == "cancelled":
            return found
        raise Conflict("path.job_id", f"job {job_id} already ended {found.status}; there is nothing to cancel")

    async def restart(self, old_id: str, by: str, key: str | None = None) -> JobRow:
        """A new queued job with the kind and params of an interrupted, failed or cancelled one. `key`
        (the route, the job and the request's Idempotency-Key): the new job's id derives from it and the
        token, so the request sent again after its process died before the key's answer was kept is
        answered with the job it made, not a 409 (I19)."""
        new_id = job_id(by, key)
        made = await self.store.restart(old_id, new_id, by)
        if made is not None:
            self.wake()
            return made
        found = await self.get(old_id)
        again = await self.store.restarted_as(old_id)
        if again is not None and key is not None and again == new_id:
            return await self.get(again)
        if again is not None:
            raise Conflict("path.job_id", f"job {old_id} was restarted already, as job {again}")
        raise Conflict(
            "path.job_id", f"job {old_id} is {found.status}; only interrupted, failed or cancelled jobs are restarted"
        )
