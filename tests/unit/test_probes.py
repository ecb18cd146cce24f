"""When a ping's answer stands for the database's (entries/probes.py)."""

from ticketiq.entries.probes import FRESH_S, ping_is_fresh


def test_a_ping_stands_for_fresh_s_and_never_while_the_database_is_known_gone() -> None:
    assert ping_is_fresh(100.0, 100.0 + FRESH_S / 2, database_down=False)
    assert not ping_is_fresh(100.0, 100.0 + FRESH_S, database_down=False)
    assert not ping_is_fresh(100.0, 100.0, database_down=True)
    assert not ping_is_fresh(None, 100.0, database_down=False)
