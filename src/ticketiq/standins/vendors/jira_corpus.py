"""Generated Jira issues: a project of N issues whose text a classifier can learn its labels from.

`generated_issue(project, n)` is a pure function of the project key and the issue number: the same
issue always reads the same, on every machine. Each issue carries one topic label (`network`,
`database`, `auth`, `billing`); its summary and description use that topic's words, with details
(service, region, customer) mixed in so that no two issues read alike.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # topic: (summary templates, description sentences)
    "network": (
        (
            "Packet loss between {region} and the {service} load balancer",
            "DNS lookups for {service} time out from {region}",
            "TLS handshake failures on the {service} ingress",
            "Latency spikes on the VPN link to {region}",
            "Firewall drops traffic from {service} to the CDN",
        ),
        (
            "Traceroute shows the hops after the edge router timing out.",
            "The network team sees retransmits and dropped packets on the uplink.",
            "Connection resets appear at the proxy before the request reaches {service}.",
            "The DNS resolver answers SERVFAIL for a few minutes at a time.",
        ),
    ),
    "database": (
        (
            "Replication lag on the {service} Postgres replica",
            "Deadlocks on writes to the {service} orders table",
            "Slow query on {service} after the index was dropped",
            "Connection pool exhausted on the {service} database",
            "Disk nearly full on the {service} primary in {region}",
        ),
        (
            "The query plan shows a sequential scan where an index scan was expected.",
            "Transactions wait on row locks and some are rolled back as deadlocks.",
            "The replica is minutes behind the primary and reads return stale rows.",
            "Vacuum has not finished on the largest table for days.",
        ),
    ),
    "auth": (
        (
            "SSO login loops back to the sign-in page for {customer}",
            "Password reset mail never arrives for {customer} users",
            "MFA codes rejected as expired on {service}",
            "Session tokens expire after a minute on {service}",
            "OAuth consent screen shows an error for {customer}",
        ),
        (
            "Users are signed out and asked for their password again.",
            "The identity provider rejects the SAML assertion as not yet valid.",
            "The login audit shows the token signature failing verification.",
            "Single sign-on works in one browser and loops in another.",
        ),
    ),
    "billing": (
        (
            "Invoice PDF is blank for {customer}",
            "{customer} was charged twice for the annual plan",
            "Refund for {customer} stuck in pending",
            "Tax missing from invoices issued in {region}",
            "Credit card declined at renewal although valid for {customer}",
        ),
        (
            "The payment provider shows two captures for one invoice.",
            "Finance needs the corrected invoice before the month closes.",
            "The subscription renewal failed and the account was downgraded.",
            "The refund was approved but the payout never left the ledger.",
        ),
    ),
}
LABELS = tuple(TOPICS)
_SERVICES = ("checkout", "search", "payments", "accounts", "catalog", "notifications", "reports", "mobile api")
_REGIONS = ("eu-west", "us-east", "ap-south", "eu-central", "us-west", "sa-east")
_CUSTOMERS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell", "Soylent")
_STATUSES = ("To Do", "To Do", "In Progress", "Done", "To Do")
# Generated issues were created one every 17 minutes from this moment on: the same on every run.
_EPOCH = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


@dataclass(frozen=True)
class GeneratedIssue:
    key: str
    summary: str
    description: str
    labels: tuple[str, ...]
    status: str
    created_at: datetime


def generated_issue(project: str, n: int) -> GeneratedIssue:
    digest = int.from_bytes(hashlib.sha256(f"{project}-{n}".encode()).digest()[:8], "big")
    topic = LABELS[digest % len(LABELS)]
    summaries, sentences = TOPICS[topic]
    facts = {
        "service": _SERVICES[(digest >> 8) % len(_SERVICES)],
        "region": _REGIONS[(digest >> 16) % len(_REGIONS)],
        "customer": _CUSTOMERS[(digest >> 24) % len(_CUSTOMERS)],
    }
    summary = summaries[(digest >> 32) % len(summaries)].format(**facts)
    first = sentences[(digest >> 40) % len(sentences)].format(**facts)
    second = sentences[(digest >> 44) % len(sentences)].format(**facts)
    reported = f"Reported by customer #{digest % 9000 + 1000} ({facts['customer']}); {digest % 40 + 2} users affected."
    description = " ".join(dict.fromkeys((first, second, reported)))  # the two sentences may be one
    return GeneratedIssue(
        key=f"{project}-{n}",
        summary=summary,
        description=description,
        labels=(topic,),
        status=_STATUSES[(digest >> 52) % len(_STATUSES)],
        created_at=_EPOCH + timedelta(minutes=17 * n),
    )
