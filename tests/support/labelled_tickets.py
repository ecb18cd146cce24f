"""Knowledge rows for the classifier-training tests: tickets whose words say their topic, written into
the `knowledge` table with SQL as test data (as a source sync would leave them)."""

from __future__ import annotations

import random
from typing import Any

import psycopg

# fmt: off
TOPICS = {
    "network": ["latency", "packet", "dns", "router", "firewall", "timeout", "vpn", "switch", "bgp", "proxy"],
    "database": ["postgres", "query", "index", "replica", "deadlock", "vacuum", "migration", "table", "wal"],
    "auth": ["login", "password", "token", "sso", "mfa", "session", "expired", "permission", "oauth", "saml"],
    "billing": ["invoice", "charge", "refund", "card", "payment", "subscription", "plan", "receipt", "vat"],
}
NOISE = ["customer", "reported", "issue", "since", "morning", "please", "check", "urgent", "service", "users",
         "affected", "team", "again", "yesterday", "escalated", "ticket", "support", "priority"]
# fmt: on


def tickets(count: int, project: str = "OPS", seed: int = 11, start: int = 1) -> list[dict[str, Any]]:
    """`count` knowledge rows of `project` (keys PROJECT-start...), each labelled with its topic first and
    a second, topic-blind label (`triaged` or `new`) after it."""
    rng = random.Random(seed)
    rows = []
    for number in range(start, start + count):
        topic = rng.choice(sorted(TOPICS))
        words = rng.sample(TOPICS[topic], 3) + rng.sample(NOISE, 10)
        rng.shuffle(words)
        rows.append({
            "key": f"{project}-{number}", "project": project, "title": " ".join(words[:4]),
            "body": " ".join(words[4:]), "labels": [topic, rng.choice(["triaged", "new"])],
        })  # fmt: skip
    return rows


def insert(db_url: str, rows: list[dict[str, Any]]) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO knowledge (source, key, project, title, body, labels, status, updated_at) "
            "VALUES ('jira', %(key)s, %(project)s, %(title)s, %(body)s, %(labels)s, 'Open', now())",
            rows,
        )
