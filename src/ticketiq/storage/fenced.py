"""What a run's handle and a job's handle share: statements bound to what one attempt holds, `(id,
attempt)`, and the one place where a statement that matched nothing becomes the fence's exception (I3).

`RunHandle` (run_store.py) and `JobHandle` (job_store.py) say which exception (`Fenced` for a run,
`JobLost` for a job) and which parameters bind the statement to their attempt; every fenced statement of
either goes through `_fenced`, `_fenced_all` or `_fenced_count` here, and each through `_check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ticketiq.errors import Fenced
from ticketiq.storage.database import Database, Row


class Statements(Protocol):
    """Where a statement runs: the pool (`Database`) or one transaction (`Session`)."""

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> int: ...

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None: ...

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]: ...


class FencedHandle:
    """Statements one attempt makes about what it holds, each bound to `(held id, attempt)`."""

    lost: type[Fenced] = Fenced  # what "matched nothing" raises

    def __init__(self, db: Database, held_id: str, attempt: int) -> None:
        self.db = db
        self.held_id = held_id
        self.attempt = attempt

    def _bound(self) -> dict[str, Any]:
        """The parameters that bind a statement to this attempt."""
        raise NotImplementedError

    def _params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        return {**self._bound(), **(params or {})}

    def _check(self, matched: bool, what: str) -> None:
        """I3: the one place a statement that matched nothing becomes the fence's exception: what this
        attempt holds was taken over (or handed back, or swept). Zero rows means stop now."""
        if not matched:
            raise self.lost(self.held_id, self.attempt, what)

    async def _fenced(
        self, name: str, what: str, params: Mapping[str, Any] | None = None, on: Statements | None = None
    ) -> Row:
        """The statement's row; no row raises the fence's exception. `on`: a transaction to run it in."""
        row = await (on or self.db).fetch_one(name, self._params(params))
        self._check(row is not None, what)
        assert row is not None  # _check raised otherwise
        return row

    async def _fenced_all(self, name: str, what: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """The statement's rows, at least one; none raises the fence's exception."""
        rows = await self.db.fetch_all(name, self._params(params))
        self._check(bool(rows), what)
        return rows

    async def _fenced_count(self, name: str, what: str, params: Mapping[str, Any] | None = None) -> None:
        """A statement whose answer is only whether it matched: exactly one row changed, or returned (a
        fenced statement's last SELECT or RETURNING gives one row when its attempt still holds). Sent
        on libpq itself (`Database.execute`, lean.py), the cheapest way a statement goes."""
        self._check(await self.db.execute(name, self._params(params)) == 1, what)
