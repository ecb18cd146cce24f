"""A client of the edge under a roll (tests/acceptance/test_roll.py, the kill trials' `roll` mode): each turn a
readiness probe and a keyed triage run (a Jira comment, an incident, a Teams reply), every answer kept, so
that any request the edge failed to serve can be named afterwards."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

POST_TRIES = 20  # a key repeated until answered, as a client of the edge must; each try is kept


@dataclass
class Load:
    """A client of the edge: a readiness probe and a keyed triage run (a Jira comment, an incident, a Teams
    reply) each turn, every answer kept. Its runs are for OPS-`first_ticket` on; `pause_s` between turns."""

    base: str
    auth: dict[str, str]
    prefix: str
    first_ticket: int = 9000
    pause_s: float = 0.02
    readyz: list[tuple[float, int | None, str]] = field(default_factory=list)  # when, status, process
    posts: dict[int, list[int | None]] = field(default_factory=dict)  # ticket -> each try's status
    runs: dict[int, str] = field(default_factory=dict)  # ticket -> run id
    halt: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.base, headers=self.auth, timeout=30) as client:
            ticket = 0
            while not self.halt.is_set():
                self._probe(client)
                self._post(client, ticket)
                ticket += 1
                self.halt.wait(self.pause_s)

    def issue(self, ticket: int) -> str:
        """The Jira issue the ticket's run triages."""
        return f"OPS-{self.first_ticket + ticket}"

    def failed(self) -> list[str]:
        """Every request the edge did not serve: a /readyz not answered 200, a POST try not answered 201
        (an error or no answer at all, a 409 while its key was still being answered included)."""
        found = [f"GET /readyz answered {status if status is not None else 'nothing'}: {said[:160]}"
                 for _, status, said in list(self.readyz) if status != 200]  # fmt: skip
        for ticket, tries in list(self.posts.items()):
            bad = [s for s in tries if s != 201]
            if bad:
                found.append(f"POST /v1/runs for {self.issue(ticket)} answered {bad} before 201 (tries {tries})")
        return found

    @property
    def requests(self) -> int:
        return len(self.readyz) + sum(len(t) for t in list(self.posts.values()))

    def _probe(self, client: httpx.Client) -> None:
        try:
            got = client.get("/readyz")
        except httpx.TransportError as exc:
            self.readyz.append((time.monotonic(), None, repr(exc)))
            return
        who = got.json().get("process", "") if got.status_code == 200 else got.text[:200]
        self.readyz.append((time.monotonic(), got.status_code, who))

    def _post(self, client: httpx.Client, ticket: int) -> None:
        tries = self.posts.setdefault(ticket, [])
        body = {"agent": "triage", "input": f"Triage {self.issue(ticket)}: checkout is failing"}
        while len(tries) < POST_TRIES:
            try:
                made = client.post("/v1/runs", json=body, headers={"Idempotency-Key": f"{self.prefix}-{ticket}"})
            except httpx.TransportError:
                tries.append(None)
                continue
            tries.append(made.status_code)
            if made.status_code == 201:
                self.runs[ticket] = str(made.json()["id"])
                return
            time.sleep(0.05)
