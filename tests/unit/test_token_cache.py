"""The process's cache of found tokens (auth/token_cache.py), with no database: served only while the
listener is connected, emptied when it connects or goes, a revoked token dropped, a lookup that raced a
revocation never kept, unknown tokens never kept, and its size bounded."""

from __future__ import annotations

from ticketiq.auth.token_cache import TokenCache


def listening(size: int = 8) -> TokenCache[str]:
    cache: TokenCache[str] = TokenCache(size)
    cache.listening()
    return cache


def test_nothing_is_served_or_kept_while_no_listener_is_connected() -> None:
    cache: TokenCache[str] = TokenCache()
    begun = cache.begin()
    assert begun is None
    assert not cache.keep("h1", "alice", "alice's", begun)
    assert cache.found("h1") is None
    live = listening()
    assert live.keep("h1", "alice", "alice's", live.begin())
    assert live.found("h1") == "alice's"
    live.lost()
    assert live.found("h1") is None and len(live) == 0
    live.listening()  # back: starts empty, what it missed is unknown
    assert live.found("h1") is None


def test_a_change_drops_the_token_by_name_and_only_it() -> None:
    cache = listening()
    for token_hash, name in (("h1", "alice"), ("h2", "bob")):
        assert cache.keep(token_hash, name, name, cache.begin())
    cache.changed("alice")
    assert cache.found("h1") is None and cache.found("h2") == "bob"


def test_a_lookup_that_began_before_a_change_is_not_kept() -> None:
    # Read before the revocation committed, answered after its notification was heard: never cached.
    cache = listening()
    begun = cache.begin()
    cache.changed("alice")
    assert not cache.keep("h1", "alice", "alice's", begun)
    assert cache.found("h1") is None
    # The same across a reconnect (notifications may have been missed).
    begun = cache.begin()
    cache.lost()
    cache.listening()
    assert not cache.keep("h1", "alice", "alice's", begun)


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    cache = listening(size=3)
    for i in range(3):
        assert cache.keep(f"h{i}", f"n{i}", f"v{i}", cache.begin())
    assert cache.found("h0") == "v0"  # h1 is now the least recently used
    assert cache.keep("h3", "n3", "v3", cache.begin())
    assert len(cache) == 3
    assert cache.found("h1") is None
    assert [cache.found(h) for h in ("h0", "h2", "h3")] == ["v0", "v2", "v3"]
