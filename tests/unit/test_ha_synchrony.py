"""Whether the formation's commits are on two nodes now, from the monitor's rows and what this machine sees
of each node's processes: a pure verdict, here over the states pg_auto_failover goes through in a failover
(the rows as `pgautofailover.node` showed them in the runs of issue 18)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.dbserver.formation.synchrony import (
    MESSAGES,
    NodeState,
    NodeView,
    Process,
    Synchrony,
    lag_bytes,
    lsn_bytes,
    verdict,
)

RUNNING, STOPPED, GONE = Process.RUNNING, Process.STOPPED, Process.GONE


def node(name: str, reported: str, assigned: str | None = None, *, process: Process = RUNNING, health: int = 1,
         replication: str = "unknown", lsn: str = "0/3000110") -> NodeView:  # fmt: skip
    node_id = int(name[-1])
    state = NodeState(node_id, name, 21000 + node_id, reported, assigned or reported, health, True, replication, lsn,
                      1, 0.4)  # fmt: skip
    return NodeView(state, process)


def test_a_primary_with_its_quorum_standby_is_synchronous() -> None:
    found = verdict([node("node1", "primary", replication="quorum"), node("node2", "secondary")])
    assert found.synchrony is Synchrony.SYNCHRONOUS
    assert (found.primary, found.standby) == ("node1", "node2")
    assert found.message == "synchronous: commits wait for the standby"


def test_after_a_failover_the_new_primary_alone_is_one_copy() -> None:
    # The old primary's row still says primary (its keeper is dead and reports nothing): its goal is demoted.
    found = verdict([node("node1", "primary", "demoted", process=GONE, health=0), node("node2", "wait_primary")])
    assert found.synchrony is Synchrony.ONE_COPY
    assert found.primary == "node2" and found.standby is None
    assert found.message == "ONE COPY: commits are acknowledged by the primary alone until the standby returns"


def test_a_killed_primary_is_not_counted_while_the_monitor_has_not_noticed() -> None:
    found = verdict([node("node1", "primary", process=GONE, replication="quorum"), node("node2", "secondary")])
    assert found.synchrony is Synchrony.NO_PRIMARY and found.primary is None


def test_a_frozen_primary_is_not_counted_either() -> None:
    found = verdict([node("node1", "primary", process=STOPPED, replication="quorum"), node("node2", "secondary")])
    assert found.synchrony is Synchrony.NO_PRIMARY


def test_a_primary_whose_standby_is_gone_has_commits_waiting_until_the_monitor_acts() -> None:
    for standby in (node("node2", "secondary", process=GONE), node("node2", "secondary", process=STOPPED),
                    node("node2", "secondary", health=0)):  # fmt: skip
        found = verdict([node("node1", "primary", replication="quorum"), standby])
        assert found.synchrony is Synchrony.STANDBY_LOST, standby
        assert found.primary == "node1"


def test_a_standby_on_its_way_back_does_not_make_it_synchronous() -> None:
    for state in (("catchingup", "secondary"), ("demoted", "catchingup"), ("secondary", "catchingup")):
        found = verdict([node("node1", "wait_primary", replication="async"), node("node2", *state)])
        assert found.synchrony is Synchrony.ONE_COPY, state


def test_a_promotion_under_way_has_no_primary_yet() -> None:
    steps = [("secondary", "prepare_promotion"), ("prepare_promotion", "stop_replication"),
             ("stop_replication", "stop_replication"), ("stop_replication", "wait_primary")]  # fmt: skip
    for reported, assigned in steps:
        found = verdict([node("node1", "primary", "draining", process=STOPPED), node("node2", reported, assigned)])
        assert found.synchrony is Synchrony.NO_PRIMARY, (reported, assigned)


def test_a_primary_the_monitor_found_unhealthy_is_not_counted() -> None:
    found = verdict([node("node1", "primary", health=0, replication="quorum"), node("node2", "secondary")])
    assert found.synchrony is Synchrony.NO_PRIMARY


def test_two_nodes_that_both_claim_writes_is_no_primary_and_names_them() -> None:
    found = verdict([node("node1", "primary"), node("node2", "wait_primary")])
    assert found.synchrony is Synchrony.NO_PRIMARY
    assert "node1" in found.why and "node2" in found.why


def test_an_empty_table_has_no_primary() -> None:
    assert verdict([]).synchrony is Synchrony.NO_PRIMARY


STATES = ["primary", "wait_primary", "single", "secondary", "catchingup", "demoted", "draining", "stop_replication",
          "prepare_promotion", "report_lsn", "maintenance", "wait_standby"]  # fmt: skip


@given(
    st.lists(
        st.tuples(st.sampled_from(STATES), st.sampled_from(STATES), st.sampled_from(list(Process)),
                  st.sampled_from([-1, 0, 1]), st.sampled_from(["sync", "quorum", "async", "unknown"])),
        min_size=0, max_size=3,
    )
)  # fmt: skip
def test_synchronous_always_names_two_running_healthy_settled_nodes(
    rows: list[tuple[str, str, Process, int, str]],
) -> None:
    views = [
        node(f"node{i + 1}", r, a, process=p, health=h, replication=rep) for i, (r, a, p, h, rep) in enumerate(rows)
    ]
    found = verdict(views)
    by_name = {v.state.name: v for v in views}
    if found.synchrony is Synchrony.NO_PRIMARY:
        assert found.primary is None
        return
    assert found.primary is not None
    lead = by_name[found.primary]
    assert lead.process is RUNNING and lead.state.health != 0 and lead.state.reported == lead.state.assigned
    if found.synchrony is Synchrony.SYNCHRONOUS:
        assert found.standby is not None and found.standby != found.primary
        standby = by_name[found.standby]
        assert standby.process is RUNNING and standby.state.health != 0
        assert (standby.state.reported, standby.state.assigned) == ("secondary", "secondary")
        assert lead.state.reported == "primary" and lead.state.replication in ("sync", "quorum")
    assert found.synchrony in MESSAGES


def test_wal_positions_and_how_far_a_node_is_behind() -> None:
    assert lsn_bytes("0/3000110") == 0x3000110
    assert lsn_bytes("1/0") == 1 << 32
    assert lsn_bytes("junk") is None and lsn_bytes("0/xyz") is None
    assert lag_bytes("0/3000110", "0/3000000") == 0x110
    assert lag_bytes("0/3000000", "0/3000110") == 0  # reported a moment later than the primary
    assert lag_bytes("0/3000000", "") is None
