"""The A2A agent card: every agent of the agents file as a skill, where to send JSON-RPC, and how to
authenticate (our API bearer tokens). Served open, at `/.well-known/agent-card.json`, in the version the
client asks for (`card_in_version`): one card, two shapes."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from ticketiq.agents.catalog import Catalog
from ticketiq.errors import ConfigError
from ticketiq.storage.task_store import as_json

RPC_PATH = "/a2a"
BEARER = "bearer"
TEXT = "text/plain"


def default_agent(catalog: Catalog, configured: str | None) -> str:
    """The agent a message naming none is for: TICKETIQ_A2A_DEFAULT_AGENT, else the file's first."""
    if configured is None:
        return next(iter(catalog.agents))
    if catalog.get(configured) is None:
        raise ConfigError(
            f"TICKETIQ_A2A_DEFAULT_AGENT={configured!r} names no agent of the agents file; "
            f"use one of {', '.join(sorted(catalog.agents))}, or unset it for the file's first"
        )
    return configured


def rpc_url(base_url: str) -> str:
    return base_url.rstrip("/") + RPC_PATH


def agent_card(catalog: Catalog, default: str, url: str) -> AgentCard:
    """The card for JSON-RPC at `url`, served in protocol 1.0 and, on the same endpoint, 0.3."""
    card = AgentCard(
        name="TicketIQ",
        description=(
            "TicketIQ agents for support and operations teams; each skill is one agent. Name the agent in the "
            f"message's metadata (`agent`); a message naming none is for {default}. A message naming a task "
            "answers the question its run asked (input-required)."
        ),
        version=version("ticketiq"),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value, protocol_version=v)
            for v in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False, extended_agent_card=False),
        default_input_modes=[TEXT],
        default_output_modes=[TEXT],
        skills=[
            AgentSkill(
                id=a.name,
                name=a.name,
                description=a.description or f"The {a.name} agent.",
                tags=["ticketiq", "default"] if a.name == default else ["ticketiq"],
            )
            for a in catalog.agents.values()
        ],
    )
    card.security_schemes[BEARER].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                description="A TicketIQ API token (`ticketiq tokens create`): `Authorization: Bearer <token>`.",
            )
        )
    )
    card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card


def card_in_version(card: AgentCard, asked: str | None) -> dict[str, Any]:
    """The card as JSON for a client that asked for protocol version `asked` (`A2A-Version`, `Major.Minor`).

    1.0 and later: the card of the 1.0 schema, nothing else in it (the schema allows no other field, and
    a security scheme is one object of its kind, `httpAuthSecurityScheme`). None, or 0.x: the spec says
    an empty version is 0.3, so the sdk's card for both, the 0.3 fields (`url`, `protocolVersion`,
    `preferredTransport`, `security`, the flat `type`/`scheme` of a security scheme) merged into the 1.0
    ones: a 0.3 client finds what it needs, and a 1.0 client that sent no version reads its own fields,
    the others ignored. A version that is no `Major.Minor` is taken for 0.3 too."""
    major, _, _ = (asked or "").strip().partition(".")
    if major.isdigit() and int(major) >= 1:
        return as_json(card)
    return agent_card_to_dict(card)
