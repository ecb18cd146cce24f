"""A remote object a job makes exactly once (an uploaded file, a fine-tuning job): I2, I9, I14 for jobs.

Before the request that makes it is sent, the job's state marks it in doubt, with the latest moment
the request can be in flight on the database clock (`in_flight_until`: the write budget from the
mark, or the job's lease expiry plus one request timeout if sooner). When the answer names the object,
its id replaces the mark. A mark still there on resume (or after a send that got no clear answer) is
settled by looking the object up by what it carries (the file's name, the job's metadata), and only
once the request can no longer be in flight: found, it is used; absent, it is sent once more.

Pure decisions over plain data; the protocol's driver is `engine/in_doubt.py`, and `jobs/fine_tune.py`'s
`RemoteRequest` the write it drives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class Sent(StrEnum):
    """What the answer to a send says became of it."""

    MADE = "made"  # answered with the object
    REFUSED = "refused"  # a 4xx: not made, and sending it again would be refused again: the job fails
    NOT_TAKEN = "not_taken"  # 429: the server did not take it; send again after the wait it asks
    IN_DOUBT = "in_doubt"  # a 5xx, a 408 or no answer at all: it may have been made


def sent_as(status: int | None) -> Sent:
    """The send's fate from its HTTP status; None when no answer came (timed out, connection lost)."""
    if status is None or status == 408 or status >= 500:
        return Sent.IN_DOUBT
    if status == 429:
        return Sent.NOT_TAKEN
    if status >= 400:
        return Sent.REFUSED
    return Sent.MADE


@dataclass(frozen=True)
class Mark:
    """A request marked in doubt: the latest moment it can be in flight (database clock)."""

    in_flight_until: datetime
    attempt: int

    @classmethod
    def of(cls, stored: Any) -> Mark | None:
        """The mark as the state holds it (the mark statement writes it); None when there is none."""
        if not isinstance(stored, Mapping) or not isinstance(stored.get("in_flight_until"), str):
            return None
        return cls(datetime.fromisoformat(stored["in_flight_until"]), int(stored.get("attempt", 0)))


def wait_before_look_s(mark: Mark, now: datetime) -> float:
    """I14: how long until the marked request can no longer be in flight, by the database clock `now`;
    0 when it is past and the object may be looked up."""
    return max(0.0, (mark.in_flight_until - now).total_seconds())


class Next(StrEnum):
    """What follows a look-up of a request in doubt."""

    USE = "use"  # found: it was made; never make it again
    SEND = "send"  # absent, though it can no longer be in flight: it was not made; send it once
    GIVE_UP = "give_up"  # absent, and this attempt sent it as often as it may


def after_look(found: str | None, sends: int, max_sends: int) -> Next:
    """`sends`: how often this attempt has sent it already."""
    if found is not None:
        return Next.USE
    return Next.SEND if sends < max_sends else Next.GIVE_UP
