"""How far a follower of a run's timeline has been told (`GET /v1/runs/{id}/events`), written as the id of
the events it was sent (the SSE `id`, which a client sends back as `Last-Event-ID` when it reconnects): a
stream that ended (its time was up, its process went, the edge dropped it) is followed again from there,
on any process, with nothing lost and nothing told twice.

A cursor holds what the follower was shown, as digests: the run's status and attempt, a digest of each
attempt and of each step as last told (48 bits of the SHA-256 of its canonical JSON), and whether it was
told the end. From a cursor a follower is told the status when it changed, each attempt and step whose
digest differs (new or changed), and `end` once the run ended, unless it was told that already. Pure.

The id rides on the last event of each batch told at once, not on each event: the whole cursor is in it,
so a run of n steps would otherwise send n ids of n digests each. A stream ends between batches, never
inside one; a connection cut inside one leaves the client the previous batch's id, so what it had of that
batch is told again (never lost).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

VERSION = "1"
DIGEST_BYTES = 6
_STATUS = re.compile(r"[a-z_]{1,32}")
_DIGEST = re.compile(r"[A-Za-z0-9_-]{8}")
# A Last-Event-ID longer than this is no id we wrote for any run (some 15 characters an item).
MAX_ID = 200_000

Told = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Cursor:
    status: str
    attempt: int
    attempts: Mapping[int, str] = field(default_factory=dict)  # attempt -> digest of it as told
    steps: Mapping[int, str] = field(default_factory=dict)  # step -> digest of it as told
    ended: bool = False  # `end` was told

    def encode(self) -> str:
        """As the events' id: `1~<status>.<attempt>~<n>.<digest>,...~<n>.<digest>,...~[e]`."""
        parts = (f"{self.status}.{self.attempt}", _items(self.attempts), _items(self.steps), "e" if self.ended else "")
        return "~".join((VERSION, *parts))


def decode(text: str) -> Cursor:
    """A cursor from the id a client sent back; ValueError saying what is wrong with one we never wrote."""
    if len(text) > MAX_ID:
        raise ValueError(f"it is {len(text)} characters long; an id of this stream is at most {MAX_ID}")
    parts = text.split("~")
    if len(parts) != 5 or parts[0] != VERSION:
        raise ValueError("it is not an id this stream sent: send back the `id` of the last event received")
    status, _, attempt = parts[1].partition(".")
    if not _STATUS.fullmatch(status) or not attempt.isdigit() or parts[4] not in ("", "e"):
        raise ValueError("it is not an id this stream sent: send back the `id` of the last event received")
    return Cursor(status, int(attempt), _parsed(parts[2]), _parsed(parts[3]), parts[4] == "e")


def shown(timeline: Mapping[str, Any]) -> Cursor:
    """What a follower told all of `timeline` has been shown (the end not yet told)."""
    run = timeline["run"]
    return Cursor(
        run["status"],
        int(run["attempt"]),
        {int(a["attempt"]): digest(a) for a in timeline["attempts"]},
        {int(s["step"]): digest(s) for s in timeline["steps"]},
    )


def told(was: Cursor | None, now: Cursor, timeline: Mapping[str, Any], terminal: Collection[str]) -> list[Told]:
    """What a follower that was shown `was` (None: nothing yet) is told of `timeline` (whose cursor is
    `now`): the run's status (with its attempt) when either changed, each attempt and each step that is
    new or changed, and `end` once the run is in a `terminal` status, unless `was` says it was told it."""
    run = timeline["run"]
    out: list[Told] = []
    if was is None or (was.status, was.attempt) != (now.status, now.attempt):
        out.append(("status", {"id": run["id"], "status": run["status"], "attempt": run["attempt"]}))
    for kind, items, before, digests in (("attempt", "attempts", was.attempts if was else {}, now.attempts),
                                         ("step", "steps", was.steps if was else {}, now.steps)):  # fmt: skip
        out += [(kind, item) for item in timeline[items] if before.get(item[kind]) != digests[item[kind]]]
    if run["status"] in terminal and not (was is not None and was.ended and not out):
        out.append(("end", {"id": run["id"], "status": run["status"]}))
    return out


def after(now: Cursor, timeline: Mapping[str, Any], terminal: Collection[str]) -> Cursor:
    """The cursor of a follower once it was told `told(..., now, timeline, ...)`."""
    return replace(now, ended=timeline["run"]["status"] in terminal)


def digest(item: Mapping[str, Any]) -> str:
    """48 bits of the SHA-256 of the item's canonical JSON, url-safe base64 (8 characters)."""
    canonical = json.dumps(item, sort_keys=True, separators=(",", ":"), default=str).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()[:DIGEST_BYTES]).decode()


def _items(digests: Mapping[int, str]) -> str:
    return ",".join(f"{n}.{d}" for n, d in sorted(digests.items()))


def _parsed(text: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for item in text.split(",") if text else ():
        n, _, d = item.partition(".")
        if not n.isdigit() or len(n) > 18 or not _DIGEST.fullmatch(d):
            raise ValueError("it is not an id this stream sent: send back the `id` of the last event received")
        out[int(n)] = d
    return out
