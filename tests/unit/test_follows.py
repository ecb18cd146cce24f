"""The follows a process holds open (views/follows.py) and when the timeline feed looks at the runs they
follow (views/timeline_feed.py), with no database: the caps per principal and in all, streams and waits
alike, with the Retry-After of a refusal; a revoked token or an ended session ends its follows and only
those, and refuses a follow opened after it was heard; when the credentials are looked at; which runs the
feed looks at when."""

from __future__ import annotations

import asyncio

import pytest

from ticketiq.views import follows as follows_module
from ticketiq.views import timeline_feed
from ticketiq.views.follows import Credential, CredentialEnded, Follows, TooMany, check_due, refusal, retry_after_s
from ticketiq.views.run_events import RECHECK_S
from ticketiq.views.timeline_feed import LOOK_S, QUIET_S, Watched, due, wait_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_principal_holds_its_cap_and_no_more_and_the_process_its_own() -> None:
    clock = Clock()
    held = Follows(per_principal=2, total=3, clock=clock)
    ana, bo, cy = Credential("ana"), Credential("bo"), Credential("cy")
    first = held.open(ana, "stream", 300)
    clock.now += 10
    held.open(ana, "wait", 30)  # a long wait takes a slot of the same cap
    with pytest.raises(TooMany) as own:
        held.open(ana, "stream", 300)
    assert "ana holds 2" in str(own.value) and "TICKETIQ_MAX_STREAMS_PER_PRINCIPAL=2" in str(own.value)
    assert own.value.principal == "ana"
    assert own.value.retry_after_s == 30  # the wait must end in 30 s, the stream in 290
    held.open(bo, "stream", 300)
    with pytest.raises(TooMany) as every:
        held.open(cy, "stream", 300)  # cy holds nothing, but the process holds 3
    assert "TICKETIQ_MAX_STREAMS=3" in str(every.value) and every.value.principal is None
    assert every.value.retry_after_s == 30
    assert (len(held), held.held_by("ana"), held.held_by("cy")) == (3, 2, 0)
    held.close(first)
    held.close(first)  # closed twice: counted once
    assert (len(held), held.held_by("ana")) == (2, 1)
    held.open(cy, "stream", 300)


def test_a_session_counts_against_the_token_it_acts_as() -> None:
    held = Follows(per_principal=2, total=10)
    held.open(Credential("ana"), "stream", 300)
    held.open(Credential("ana", "s1"), "stream", 300)
    with pytest.raises(TooMany):
        held.open(Credential("ana", "s2"), "stream", 300)


async def test_a_slot_is_given_back_however_the_block_ends() -> None:
    held = Follows(per_principal=1, total=1)
    inside: list[int] = []

    async def failing_wait() -> None:
        async with held.slot(Credential("ana"), "wait", 10):
            inside.append(len(held))
            raise RuntimeError("the wait failed")

    with pytest.raises(RuntimeError):
        await failing_wait()
    assert inside == [1] and len(held) == 0
    async with held.slot(Credential("ana"), "wait", 10) as follow:
        assert follow.kind == "wait" and not follow.ended.is_set()


def test_a_revoked_token_ends_its_follows_and_its_sessions_and_no_other() -> None:
    held = Follows(per_principal=5, total=10)
    by_token = held.open(Credential("ana"), "stream", 300)
    by_session = held.open(Credential("ana", "s1"), "stream", 300)
    other = held.open(Credential("bo", "s2"), "stream", 300)
    told: list[str] = []
    by_token.when_ended(lambda: told.append("token"))
    held.token_ended("ana")
    assert by_token.ended.is_set() and by_session.ended.is_set() and not other.ended.is_set()
    assert by_token.why == follows_module.REVOKED and told == ["token"]
    with pytest.raises(CredentialEnded, match="revoked"):  # authenticated before the revocation was heard
        held.open(Credential("ana"), "stream", 300)
    held.open(Credential("bo"), "stream", 300)


def test_an_ended_session_ends_its_own_follows_only() -> None:
    held = Follows(per_principal=5, total=10)
    signed_out = held.open(Credential("ana", "s1"), "stream", 300)
    other_session = held.open(Credential("ana", "s2"), "stream", 300)
    by_token = held.open(Credential("ana"), "stream", 300)
    held.session_ended("s1")
    assert signed_out.ended.is_set() and signed_out.why == follows_module.SIGNED_OUT
    assert not other_session.ended.is_set() and not by_token.ended.is_set()
    with pytest.raises(CredentialEnded, match="session"):
        held.open(Credential("ana", "s1"), "stream", 300)
    held.open(Credential("ana"), "stream", 300)  # the token still holds


def test_a_look_ends_what_it_found_ended_among_what_it_asked_about() -> None:
    held = Follows(per_principal=5, total=10)
    revoked = held.open(Credential("ana"), "stream", 300)
    expired = held.open(Credential("bo", "s1"), "stream", 300)
    alive = held.open(Credential("bo", "s2"), "stream", 300)
    assert held.credentials() == ({"ana", "bo"}, {"s1", "s2"})
    opened_since = held.open(Credential("cy"), "stream", 300)  # after the look read: not asked about
    held.checked({"ana", "bo"}, {"bo"}, {"s1", "s2"}, {"s2"})
    assert revoked.ended.is_set() and expired.ended.is_set()
    assert not alive.ended.is_set() and not opened_since.ended.is_set()


def test_the_ended_credentials_remembered_are_bounded() -> None:
    held = Follows(per_principal=5, total=10)
    for n in range(follows_module.ENDED_KEPT + 1):
        held.token_ended(f"t{n}")
    held.open(Credential("t0"), "stream", 300)  # the oldest is forgotten (its race is long over)
    with pytest.raises(CredentialEnded):
        held.open(Credential(f"t{follows_module.ENDED_KEPT}"), "stream", 300)


def test_the_decisions() -> None:
    assert refusal(0, 0, 1, 1, "ana") is None
    assert refusal(19, 999, 20, 1000, "ana") is None
    assert "ana holds 20" in (refusal(20, 20, 20, 1000, "ana") or "")
    assert "holds 1000" in (refusal(3, 1000, 20, 1000, "ana") or "")
    assert retry_after_s([1010.2, 1300.0], 1000.0) == 11
    assert retry_after_s([999.0], 1000.0) == 1  # overdue: at least a second
    assert retry_after_s([], 1000.0) == 1
    assert check_due(0.0, listening=True, reconnected=True)
    assert not check_due(29.0, listening=True, reconnected=False)
    assert check_due(30.0, listening=True, reconnected=False)
    assert check_due(1.0, listening=False, reconnected=False)
    assert not check_due(0.5, listening=False, reconnected=False)


def test_the_feed_looks_at_running_runs_often_and_at_waiting_ones_rarely() -> None:
    def watched(status: str | None, looked_at: float, woken: bool = False, gone: bool = False) -> Watched:
        timeline = None if status is None else {"run": {"status": status}}
        return Watched(timeline=timeline, looked_at=looked_at, woken=woken, gone=gone)

    now = 100.0
    runs = {
        "new": watched(None, -1e9, woken=True),
        "running": watched("running", now - LOOK_S),
        "running_just_looked": watched("running", now - 0.1),
        "waiting": watched("waiting", now - LOOK_S),
        "waiting_woken": watched("waiting", now - 0.1, woken=True),  # its status changed: a notification
        "waiting_long": watched("waiting", now - QUIET_S),
        "gone": watched("running", now - 10, gone=True),
    }
    assert due(runs, now, listening=True) == ["new", "running", "waiting_woken", "waiting_long"]
    # The listener is down: a status change may go unheard, so waiting runs are looked at every RECHECK_S.
    assert "waiting" not in due(runs, now, listening=False)
    assert due({"w": watched("waiting", now - RECHECK_S)}, now, listening=False) == ["w"]
    quiet = {"w": watched("waiting", now - 1.0), "r": watched("running", now - 0.2)}
    assert wait_s(quiet, now, listening=True) == pytest.approx(LOOK_S - 0.2)
    assert wait_s({"w": watched("waiting", now - 1.0)}, now, listening=True) == pytest.approx(QUIET_S - 1.0)
    assert wait_s({}, now, listening=True) == timeline_feed.QUIET_S


async def test_a_follow_ended_wakes_whoever_waits_on_it() -> None:
    held = Follows(per_principal=1, total=1)
    follow = held.open(Credential("ana"), "stream", 300)
    woken = asyncio.Event()
    follow.when_ended(woken.set)
    asyncio.get_running_loop().call_soon(held.token_ended, "ana")
    async with asyncio.timeout(1):
        await woken.wait()
    late = asyncio.Event()
    follow.when_ended(late.set)  # asked after it ended: told at once
    assert late.is_set()


def test_a_runs_wait_is_held_outside_the_caps_and_still_ends_with_its_token() -> None:
    held = Follows(per_principal=2, total=3)
    ana = Credential("ana")
    waits = [held.open(ana, "wait", 30, capped=False) for _ in range(10)]  # past both caps: none refused
    held.open(ana, "stream", 300)
    held.open(ana, "stream", 300)
    with pytest.raises(TooMany):
        held.open(ana, "stream", 300)  # the streams' cap counts streams only
    assert len(held) == 2
    held.close(waits[0])
    held.token_ended("ana")
    assert all(w.ended.is_set() for w in waits[1:])
    assert not waits[0].ended.is_set()  # closed before: no longer held
    with pytest.raises(CredentialEnded):
        held.open(ana, "wait", 30, capped=False)
