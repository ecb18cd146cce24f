"""`ticketiq runs export --since T --until T [--out FILE]`: the runs that ended in [since, until) as JSON
Lines, read from the database directly (TICKETIQ_DATABASE_URL, else the home's embedded server), as `db`
and `tokens` do: an export needs no app process and no token. T is ISO 8601 (a date, or a date and time;
UTC when it names no offset) or a span back from now (`30d`, `12h`), now being the database's clock."""

from __future__ import annotations

import asyncio
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ticketiq.errors import ExportFailed, RequestError
from ticketiq.settings import Settings

_SPAN = re.compile(r"(\d+)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}

When = datetime | timedelta  # a time, or a span back from the database's now


def parse_when(flag: str, text: str) -> When:
    """A time as `--since`/`--until` take it; a RequestError naming the flag when it is none."""
    given = text.strip()
    span = _SPAN.fullmatch(given)
    if span:
        try:
            return timedelta(**{_UNITS[span.group(2)]: int(span.group(1))})
        except OverflowError:
            raise RequestError(flag, f"{flag}: {text!r} reaches back too far") from None
    try:
        at: datetime | None = datetime.fromisoformat(given)  # a date alone is its midnight
    except ValueError:
        at = None
    if at is None:
        raise RequestError(flag, f"{flag}: {text!r} is no time: give ISO 8601 (2026-11-01, 2026-11-01T08:00:00Z, "
                                 "2026-11-01T08:00:00+01:00; UTC when no offset) or a span back from now (30d, "
                                 "12h, 90m, 2w)")  # fmt: skip
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def resolved(flag: str, when: When, now: datetime) -> datetime:
    """The time a parsed `When` names, `now` being the database's clock."""
    if isinstance(when, datetime):
        return when
    try:
        return now - when
    except OverflowError:
        raise RequestError(flag, f"{flag}: {when.days}d back from now is before the year 1") from None


def bounds(since: When, until: When, now: datetime) -> tuple[datetime, datetime]:
    """[since, until); a RequestError naming --until when the range is empty."""
    start, end = resolved("--since", since, now), resolved("--until", until, now)
    if end <= start:
        raise RequestError("--until", f"--until ({end.isoformat()}) must be after --since ({start.isoformat()})")
    return start, end


def runs_export(settings: Settings, since_text: str, until_text: str, out: Path | None) -> int:
    """The command: input checked before the database is touched; prints to stderr how many runs it wrote."""
    from ticketiq.dbserver.target import resolve
    from ticketiq.storage import database
    from ticketiq.storage.export_store import ExportStore
    from ticketiq.views import run_export

    since, until = parse_when("--since", since_text), parse_when("--until", until_text)
    if isinstance(since, datetime) and isinstance(until, datetime):
        bounds(since, until, since)  # refused before any connection
    if out is not None and not out.parent.is_dir():
        raise RequestError("--out", f"--out: no directory {out.parent} to write {out.name} in")

    async def run() -> int:
        db = database.Database(target.url, min_size=1, max_size=2,
                               limits=database.ConnectionLimits.from_settings(settings))  # fmt: skip
        await db.open()
        try:
            start, end = bounds(since, until, await ExportStore(db).now())
            count = await run_export.export_to(db, start, end, out, sys.stdout.buffer)
        finally:
            await db.close()
        where = "stdout" if out is None else str(out)
        print(f"exported {count} run{'' if count == 1 else 's'} that ended in [{start.isoformat()}, "
              f"{end.isoformat()}) to {where}", file=sys.stderr)  # fmt: skip
        return 0

    target = resolve(settings)
    try:
        return asyncio.run(run())
    except ExportFailed as exc:
        print(f"ticketiq: {exc}", file=sys.stderr)
        return 1
    finally:
        target.release()
