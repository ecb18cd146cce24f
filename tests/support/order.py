"""The order the suite's tests go out in under pytest-xdist's worksteal scheduler (`make test`).

Worksteal gives each of N workers one contiguous block of the collection at the start (the first
len // N to the first worker, and so on), and a worker that runs out takes the back half of the longest
queue left. Sorted longest first and cut in blocks, the collection gave the first worker every long test,
and the others, idle, took them from its back: the longest tests ran last and the suite waited on them.
So the long ones are dealt, one to the front of each block in turn. The rest are laid after them in their
order, not dealt: a module's tests stay side by side, on one worker, so its module-scoped fixtures (a
console process, a pair of database servers, a browser) start once rather than once a worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def blocks(total: int, workers: int) -> list[int]:
    """The sizes of worksteal's first blocks, as it cuts them (xdist/scheduler/worksteal.py check_schedule)."""
    sizes = []
    left = total
    for index in range(workers):
        sizes.append(left // (workers - index))
        left -= sizes[-1]
    return sizes


def dealt(leads: Sequence[T], rest: Sequence[T], workers: int) -> list[T]:
    """`leads` (longest first) dealt round the fronts of the workers' blocks, `rest` filling the blocks
    after them in its order; the blocks laid end to end, as worksteal will cut them again."""
    if workers < 2:
        return [*leads, *rest]
    sizes = blocks(len(leads) + len(rest), workers)
    hands: list[list[T]] = [[] for _ in sizes]
    turn = 0
    for item in leads:
        while len(hands[turn]) == sizes[turn]:
            turn = (turn + 1) % workers
        hands[turn].append(item)
        turn = (turn + 1) % workers
    left = iter(rest)
    for hand, size in zip(hands, sizes, strict=True):
        hand.extend(item for _, item in zip(range(size - len(hand)), left, strict=False))
    return [item for hand in hands for item in hand]
