"""When a cron schedule fires: pure decisions over an expression, its IANA zone and instants.

Fire times are computed in the schedule's zone (croniter over `zoneinfo` datetimes) and handed out as
UTC instants; the database stores them as timestamptz. Nothing here reads the clock: `now` is an
argument (the database clock, as the leader's query saw it).

Daylight saving time, the rules (each unit-tested in tests/unit/test_schedules.py):

- Spring forward (a wall time that does not exist, 02:30 in New York on the day clocks skip from
  02:00 to 03:00). croniter moves a fire the gap swallows to the first valid instant after the gap
  when the expression fixes the hour (`30 2 * * *` fires at 03:00 that day, once; `*/15 2 * * *` fires
  once, at 03:00, not four times), and drops it when the hour is a wildcard (`30 * * * *` has no fire in
  the missing hour; its next is 03:30). We keep croniter's rule as it is.
- Fall back (a wall time that happens twice, 01:30 in New York on the day clocks go from 02:00 back to
  01:00). croniter fires both passes (01:30 EDT and 01:30 EST). We fire each wall time once, at its
  first pass: a second-pass time croniter names is passed over. A schedule that fires every few
  minutes so pauses for the repeated hour instead of firing it twice.

Missed fires (TICKETIQ_CRON_MISSED): fire times that passed while no leader looked (every process was
down). A schedule's due times are its fire times from its `next_fire_at` up to now. Only the latest of
them can fire: the earlier ones are dropped under either policy. The latest fires when it is on time
(within ON_TIME_S of now: a leader failover takes seconds); a later one is missed, and then `latest`
fires it (one fire for the latest missed time) and `skip` does not (it is recorded as skipped, and the
schedule goes on from its next future time).
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from croniter import CroniterError, croniter

# A fire time found this late (a leader failover, a slow sweep) is on time, not missed: failover takes
# the lease TTL (8 s) at worst, and the leader checks every TICKETIQ_CRON_CHECK_S.
ON_TIME_S = 60.0
ALIASES = frozenset({"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"})
# croniter's H (hashed) and R (random) fields pick a time per parse: two leaders would disagree.
_PICKED = re.compile(r"^[HR](\(|/|$)", re.IGNORECASE)
# Where `latest_due` starts looking back from now; it doubles until a fire time is in the window.
_FIRST_WINDOW = timedelta(minutes=2)
_TICK = timedelta(microseconds=1)


class Missed(StrEnum):
    """TICKETIQ_CRON_MISSED: what becomes of a fire time that passed while every process was down."""

    LATEST = "latest"  # one fire, for the latest missed time
    SKIP = "skip"  # none: the schedule goes on from its next future time


@dataclass(frozen=True)
class Cron:
    """A schedule's expression and the IANA zone its wall times are in."""

    expression: str
    zone: str


@dataclass(frozen=True)
class FirePlan:
    """What the leader does with one due schedule, now."""

    fires: tuple[datetime, ...]  # fire times to fire now (UTC): none or one
    skipped: tuple[datetime, ...]  # a missed time not fired (`skip`): recorded, never fired
    next_fire_at: datetime  # the first fire time after now (UTC)
    dropped: bool  # earlier due times were passed over (only the latest of them could fire)


def cron_problem(expression: str) -> str | None:
    """Why the expression is refused (the 422's message), or None for a valid one."""
    text = expression.strip()
    if text.lower() in ALIASES:
        return None
    fields = text.split()
    if len(fields) != 5:
        return (
            f"a cron expression has five fields (minute hour day-of-month month day-of-week) or is one of "
            f"{', '.join(sorted(ALIASES))}; {expression!r} has {len(fields)}"
        )
    if any(_PICKED.match(f) for f in fields):
        return "H and R (hashed and random) fields are not supported: name the times"
    if not croniter.is_valid(text):
        return f"{expression!r} is not a valid cron expression"
    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterError:
        return f"{expression!r} names no time that exists (such as 30 February)"
    return None


@functools.cache
def _zones() -> frozenset[str]:
    # `localtime` is the machine's own zone, not a name; posix/ and right/ are copies (right/ counts leap
    # seconds, which Python's datetimes do not).
    names = zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"}
    return frozenset(n for n in names if not n.startswith(("posix/", "right/")))


def zone_problem(name: str) -> str | None:
    """Why the zone is refused, or None for an IANA zone name ("Europe/Berlin", "UTC")."""
    if name in _zones():
        return None
    return f"{name!r} is not an IANA time zone name (such as UTC, Europe/Berlin, America/New_York)"


def _second_pass(at: datetime) -> bool:
    """Whether `at` (zone-aware) is the second pass of a wall time that happens twice (a fall back)."""
    wall = at.replace(tzinfo=None)
    passes = [wall.replace(fold=fold, tzinfo=at.tzinfo).astimezone(UTC) for fold in (0, 1)]
    return passes[0] != passes[1] and at.astimezone(UTC) == max(passes)


def next_after(cron: Cron, after: datetime) -> datetime:
    """The first fire time strictly after the instant `after` (zone-aware), as UTC, the DST rules applied."""
    times = croniter(cron.expression.strip(), after.astimezone(zoneinfo.ZoneInfo(cron.zone)))
    while True:
        at: datetime = times.get_next(datetime)
        if not _second_pass(at):
            return at.astimezone(UTC)


def fire_times(cron: Cron, after: datetime, count: int) -> list[datetime]:
    """The next `count` fire times after `after`."""
    out: list[datetime] = []
    at = after
    for _ in range(count):
        at = next_after(cron, at)
        out.append(at)
    return out


def latest_due(cron: Cron, first: datetime, now: datetime) -> datetime | None:
    """The latest fire time in [first, now], or None when there is none. Looks back from now in a window
    that doubles, so a month of a minutely schedule's missed times is not walked one by one."""
    if first > now:
        return None
    window = _FIRST_WINDOW
    while True:
        start = max(now - window, first - _TICK)
        found = None
        at = next_after(cron, start)
        while at <= now:
            found = at
            at = next_after(cron, at)
        if found is not None or start == first - _TICK:
            return found
        window *= 2


def plan(cron: Cron, first: datetime, now: datetime, missed: Missed, on_time_s: float = ON_TIME_S) -> FirePlan:
    """What to fire for a schedule whose first fire time not yet considered is `first`, at `now`."""
    latest = latest_due(cron, first, now)
    if latest is None:
        return FirePlan((), (), first if first > now else next_after(cron, now), dropped=False)
    following = next_after(cron, now)
    dropped = latest > first
    if (now - latest).total_seconds() > on_time_s and missed is Missed.SKIP:
        return FirePlan((), (latest,), following, dropped)
    return FirePlan((latest,), (), following, dropped)
