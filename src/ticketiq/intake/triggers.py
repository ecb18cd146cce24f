"""Webhook triggers and Jira ticket events, from a signed request to a started run (issue 8).

The decisions are pure (`webhook_signature`, `webhook_triggers`, `ticket_events`); this is the thin
driver around them. A request is checked before anything is stored: its signature over the raw body
(401), then its headers and body (4xx naming what is wrong). A signed delivery becomes one run:

1. what was signed is claimed for the delivery id (`signed_once`, I19): the same signed content under
   another id is a replay and starts nothing (a webhook's is refused 409, a ticket event's answered
   with the first event's runs);
2. the run is created, not started, under a key derived from (trigger, delivery id), or (event
   identifier, agent): a retry after a crash finds the same run, never a second one;
3. the delivery (or event) is recorded with that run: a redelivery is answered from this row;
4. the run is started here. Should the process die before, the leader's sweep starts it (a queued
   run no process took); should it die while the run works, the run is resumed as any run (I13).

Webhook and ticket-event runs may not wait and hand nothing on: the caller has hung up, so the answer
lands on the transcript, in the run's ending statement.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ticketiq.auth import webhook_signature
from ticketiq.engine.engine import Engine
from ticketiq.errors import Conflict, NotFound, RequestError
from ticketiq.intake import signed_once, ticket_events, webhook_triggers
from ticketiq.intake.signed_once import Outcome, SignedClaim
from ticketiq.intake.ticket_events import TicketEvent
from ticketiq.intake.webhook_triggers import SealedSecret
from ticketiq.storage.trigger_store import Signing, TriggerShown, TriggerStore
from ticketiq.values.storable import is_storable

log = logging.getLogger(__name__)

# A run's input is at most this long, as through the API.
MAX_INPUT_CHARS = 100_000


class Unsigned(RequestError):
    """The request is not signed by a secret we hold (or its signature is stale): 401."""

    status = 401


class TooLarge(RequestError):
    status = 413


class Replayed(Conflict):
    """A signed request delivered already under another delivery id (I19): it starts nothing. 409, with
    the run the first delivery started (None while it has recorded none)."""

    def __init__(self, first: str, run_id: str | None) -> None:
        super().__init__(f"header.{webhook_signature.SIGNATURE_HEADER}", signed_once.replay_message(first))
        self.first = first
        self.run_id = run_id


@dataclass(frozen=True)
class Delivered:
    run_id: str
    created: bool  # False: a redelivery (or a retry after a crash) found the run the first one made


class Triggers:
    """Declaring webhook triggers, rotating their secrets, and taking their deliveries."""

    def __init__(self, engine: Engine, store: TriggerStore) -> None:
        self.engine = engine
        self.store = store
        self.keys = engine.deps.keys

    async def declare(self, name: str, agent: str, secret: str, by: str, key: str | None = None) -> TriggerShown:
        """A trigger with its first secret. `key` (the route and the request's Idempotency-Key): the
        same request sent again after its process died before the key's answer was kept is answered
        with the trigger it made, not "exists"."""
        webhook_triggers.checked_name(name)
        webhook_triggers.checked_secret(secret)
        if self.engine.deps.catalog.get(agent) is None:
            raise NotFound("body.agent", f"no agent named {agent!r} in the agents file")
        sealed = webhook_triggers.seal_secret(self.keys, name, secret)
        made = await self.store.create(
            name, agent, (sealed.key_id, sealed.nonce, sealed.ciphertext), by, webhook_triggers.request_key(by, key)
        )
        if not made:
            raise Conflict("body.name", f"a trigger named {name} exists; add a secret to it to rotate")
        return await self._shown(name)

    async def every(self) -> list[TriggerShown]:
        return await self.store.every()

    async def add_secret(
        self, name: str, secret: str, expire_others_in_s: float | None, by: str, key: str | None = None
    ) -> TriggerShown:
        """A second secret, active at once beside the first (a rotation); with `expire_others_in_s` the
        secrets active until now stop being accepted that long from now. `key` as for `declare`: the
        same request sent again after a crash finds the secret it added, never adds a second."""
        webhook_triggers.checked_secret(secret)
        sealed = webhook_triggers.seal_secret(self.keys, name, secret)
        added = await self.store.add_secret(
            name, (sealed.key_id, sealed.nonce, sealed.ciphertext), expire_others_in_s, by,
            webhook_triggers.add_refusal, webhook_triggers.request_key(by, key),
        )  # fmt: skip
        if added is None:
            raise NotFound("path.name", f"no trigger named {name}")
        return await self._shown(name)

    async def retire_secret(self, name: str, n: int, by: str) -> TriggerShown:
        """Secret `n` is no longer accepted, from now on (never the last active one)."""
        if not await self.store.retire_secret(name, n, by, lambda s: webhook_triggers.retire_refusal(s, n)):
            raise NotFound("path.name", f"no trigger named {name}")
        return await self._shown(name)

    async def _shown(self, name: str) -> TriggerShown:
        shown = await self.store.get(name)
        if shown is None:
            raise NotFound("path.name", f"no trigger named {name}")
        return shown

    # ----- deliveries ---------------------------------------------------------------------------------

    async def deliver(self, name: str, delivery_id: str | None, signature: str | None, body: bytes) -> Delivered:
        """Check a delivery, then start its run once (see the module's steps)."""
        signing = await self.store.signing(name)
        check = webhook_signature.check_delivery(signature, body, self._secrets(name, signing), signing.now_s)
        if not check.accepted:
            # The same answer for an unknown trigger: an unsigned caller learns nothing of which exist.
            log.info("webhook delivery to %r refused: %s", name, check.verdict)
            raise Unsigned(f"header.{webhook_signature.SIGNATURE_HEADER}", check.reason)
        problem = webhook_triggers.delivery_id_problem(delivery_id)
        if problem is not None or delivery_id is None:
            raise RequestError(f"header.{webhook_signature.DELIVERY_HEADER}", problem or "")
        text = _input(body)
        # A signature verified: the trigger exists, and its t was read.
        assert signing.agent is not None and check.timestamp is not None
        agent = self.engine.deps.catalog.get(signing.agent)
        if agent is None:
            raise Conflict(
                "path.name", f"trigger {name} starts agent {signing.agent}, which the agents file no longer defines"
            )
        bound_to, purged = await _claimed(
            self.store, signed_once.webhook_claim(name, check.timestamp, body, delivery_id)
        )
        recorded = await self.store.delivery(name, delivery_id)
        outcome = signed_once.decide(delivery_id, bound_to, started=recorded is not None, purged=purged)
        if outcome is Outcome.REPLAY:
            log.warning("webhook delivery %r to %r repeats the signed request of delivery %r: refused, nothing "
                        "started", delivery_id, name, bound_to)  # fmt: skip
            raise Replayed(bound_to, await self.store.delivery(name, bound_to))
        if outcome is Outcome.PURGED:
            log.warning("webhook delivery %r to %r: its run was purged; refused, nothing started", delivery_id, name)
            raise Conflict(f"header.{webhook_signature.DELIVERY_HEADER}", signed_once.purged_message(delivery_id))
        if recorded is not None:  # Outcome.REDELIVERY
            return Delivered(recorded, created=False)
        created = await self.engine.submit(
            agent.name, text, may_wait=False, channel=webhook_triggers.CHANNEL, actor=webhook_triggers.actor(name),
            idempotency_key=webhook_triggers.run_key(name, delivery_id), start=False,
        )  # fmt: skip
        run_id = await self.store.record_delivery(name, delivery_id, created.id)
        if created.created:
            await self.engine.start(run_id)  # not taken here: the sweep takes it
        return Delivered(run_id, created.created)

    def _secrets(self, name: str, signing: Signing) -> list[bytes]:
        opened = []
        for stored in signing.secrets:
            secret = webhook_triggers.open_secret(
                self.keys, name, SealedSecret(stored.key_id, stored.nonce, stored.ciphertext)
            )
            if secret is None:
                log.error("trigger %s: secret %d does not open (seal key %r is not in TICKETIQ_SEAL_KEYS, or the row "
                          "was altered): add a new secret to the trigger", name, stored.n, stored.key_id)  # fmt: skip
                continue
            opened.append(secret)
        return opened


async def _claimed(store: TriggerStore, claim: SignedClaim) -> tuple[str, bool]:
    """The delivery id what was signed is bound to, and whether that delivery's run was purged. I19:
    claimed before anything else is stored; a copy racing this one waits on its claim and finds it."""
    return await store.claim_signed(claim.source, claim.digest, claim.delivery_id, claim.kept_until_s)


def _input(body: bytes) -> str:
    """The run's input: the body as text, exactly as sent (I16: refused when it cannot be stored)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("body", "the body is not UTF-8 text") from None
    if not text.strip():
        raise RequestError("body", "the body is empty; it is the run's input")
    if len(text) > MAX_INPUT_CHARS:
        raise TooLarge("body", f"the body is {len(text)} characters long; a run's input is at most {MAX_INPUT_CHARS}")
    if not is_storable(text):
        raise RequestError("body", "the body holds text that cannot be stored (a NUL character); remove it")
    return text


class TicketIntake:
    """Jira Cloud issue webhooks: each agent that opted in for the event is started once per event."""

    def __init__(self, engine: Engine, store: TriggerStore) -> None:
        self.engine = engine
        self.store = store

    async def receive(self, identifier: str | None, signature: str | None, body: bytes) -> dict[str, str]:
        """Check an event, then start each agent that opted in for it once; the runs (agent: run id),
        those an earlier delivery of the event started included."""
        configured = self.engine.deps.settings.jira_webhook_secret
        check = webhook_signature.check_hub(signature, body, configured.encode() if configured else None)
        if not check.accepted:
            log.info("ticket event refused: %s", check.verdict)
            raise Unsigned(f"header.{webhook_signature.HUB_HEADER}", check.reason)
        problem = ticket_events.identifier_problem(identifier)
        if problem is not None or identifier is None:
            raise RequestError(f"header.{ticket_events.IDENTIFIER_HEADER}", problem or "")
        event = ticket_events.parse_event(identifier, body)
        asked = ticket_events.run_input(event)
        if not is_storable(asked):
            raise RequestError("body.issue.fields.summary", "the summary holds text that cannot be stored")
        agents = ticket_events.opted_in(event.name, self.engine.deps.catalog.agents)
        if not agents:
            return {}  # nothing to start, so nothing to claim or store
        claim = signed_once.ticket_event_claim(identifier, body)
        bound_to, purged = await _claimed(self.store, claim)
        found = await self.store.event_runs(identifier)
        outcome = signed_once.decide(identifier, bound_to, started=bool(found), purged=purged)
        if outcome is Outcome.PURGED:
            # Its runs were purged by the retention policy (their records with them): none is made again.
            log.warning("ticket event %r: its runs were purged; nothing started", identifier)
            return {}
        if outcome is Outcome.REPLAY:
            # The same signed body under another identifier: Jira does not sign the identifier header,
            # so this is a replay (or a second Jira webhook for one event). It starts nothing.
            log.warning("ticket event %r repeats the body of event %r: nothing started", identifier, bound_to)
            return {r.agent: r.run_id for r in await self.store.event_runs(bound_to)}
        # New, or delivered again: what a crash left unmade is made now, the rest is found.
        runs = {r.agent: r.run_id for r in found}
        created = []
        for agent in agents:
            if agent in runs:
                continue
            made = await self.engine.submit(
                agent, asked, may_wait=False, channel=ticket_events.CHANNEL, actor=ticket_events.ACTOR,
                idempotency_key=ticket_events.run_key(identifier, agent), start=False,
            )  # fmt: skip
            runs[agent] = await self._record(event, agent, made.id, claim.digest)
            if made.created:
                created.append(runs[agent])
        for run_id in created:
            await self.engine.start(run_id)  # not taken here: the sweep takes it
        return runs

    async def _record(self, event: TicketEvent, agent: str, run_id: str, digest: str) -> str:
        return await self.store.record_event_run(event.identifier, agent, run_id, event.name, event.issue_key, digest)
