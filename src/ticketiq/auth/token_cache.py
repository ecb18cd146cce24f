"""Tokens found by their hash, kept in the process so a request is authenticated without a statement
(issue 19), and dropped the moment their row changes.

Pure state, no I/O: whoever listens for changes (`engine/gate_watch.py`, LISTEN `ticketiq_tokens`, which a
trigger on `api_tokens` notifies in the revoking transaction) tells the cache; whoever looks tokens up
(`storage/token_store.py`) asks it first. The rules:

- Nothing is served while no listener is connected (`trusted` false): a revocation could go unheard.
  A listener that (re)connects starts from an empty cache: what it missed while away is unknown.
- A lookup keeps what it found only if no change was heard since it began (`begin` / `keep`): a row
  read before a revocation committed must not be cached after its notification dropped the entry.
- Only found tokens are kept, at most `size` (the least recently used go first): unknown tokens never
  grow it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

SIZE = 1024


class TokenCache(Generic[V]):
    def __init__(self, size: int = SIZE) -> None:
        self.size = size
        self.trusted = False
        self.generation = 0  # bumped by every change heard, connect and loss
        self._found: OrderedDict[str, tuple[str, V]] = OrderedDict()  # hash -> (token name, what was found)

    def __len__(self) -> int:
        return len(self._found)

    def found(self, token_hash: str) -> V | None:
        """What a lookup found for this hash, while it may be trusted; None: look it up."""
        if not self.trusted:
            return None
        kept = self._found.get(token_hash)
        if kept is None:
            return None
        self._found.move_to_end(token_hash)
        return kept[1]

    def begin(self) -> int | None:
        """Before a lookup: what `keep` is given back; None while nothing may be kept."""
        return self.generation if self.trusted else None

    def keep(self, token_hash: str, name: str, value: V, begun: int | None) -> bool:
        """Keep what a lookup found, unless a change was heard (or the listener came or went) since it began."""
        if begun is None or begun != self.generation or not self.trusted:
            return False
        self._found[token_hash] = (name, value)
        self._found.move_to_end(token_hash)
        while len(self._found) > self.size:
            self._found.popitem(last=False)
        return True

    def changed(self, name: str) -> None:
        """The token named `name` was revoked (or its row changed): drop it, and void lookups in flight."""
        self.generation += 1
        for token_hash in [h for h, (n, _) in self._found.items() if n == name]:
            del self._found[token_hash]

    def listening(self) -> None:
        """The listener is connected: served from here on, starting empty (what was missed is unknown)."""
        self.generation += 1
        self._found.clear()
        self.trusted = True

    def lost(self) -> None:
        """The listener is gone: every request looks its token up until it is back."""
        self.trusted = False
        self.generation += 1
        self._found.clear()
