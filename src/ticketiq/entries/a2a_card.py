"""The A2A agent card: every agent of the agents file as a skill, where to send JSON-RPC, and how to
authenticate (our API bearer tokens). Served open, at `/.well-known/agent-card.json`."""

from __future__ import annotations

from importlib.metadata import version

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
