from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.order import blocks, dealt


def test_each_workers_block_starts_with_its_share_of_the_long_ones_and_the_rest_stay_in_order() -> None:
    order = dealt(["L0", "L1", "L2", "L3", "L4"], [f"r{n}" for n in range(9)], 4)
    assert blocks(14, 4) == [3, 3, 4, 4]
    cut = [order[0:3], order[3:6], order[6:10], order[10:14]]  # worksteal's first blocks
    assert cut == [["L0", "L4", "r0"], ["L1", "r1", "r2"], ["L2", "r3", "r4", "r5"], ["L3", "r6", "r7", "r8"]]


@given(st.integers(min_value=0, max_value=60), st.integers(min_value=0, max_value=300), st.integers(1, 12))
def test_every_test_goes_out_once_each_block_leads_with_a_long_one_and_the_rest_keep_their_order(
    long: int, rest: int, workers: int
) -> None:
    leads = [("long", n) for n in range(long)]
    others = [("rest", n) for n in range(rest)]
    order = dealt(leads, others, workers)
    assert sorted(order) == sorted(leads + others)
    assert [item for item in order if item[0] == "rest"] == others
    sizes = blocks(long + rest, workers)
    assert sum(sizes) == long + rest and max(sizes) - min(sizes) <= 1
    starts = [sum(sizes[:index]) for index in range(workers)]
    fronts = [order[start] for start, size in zip(starts, sizes, strict=True) if size]
    assert sum(item[0] == "long" for item in fronts) == min(long, len(fronts))
