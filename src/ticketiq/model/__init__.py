"""The chat-completions client the engine asks for each step.

May import only the base modules (settings, errors, stall, json_depth, user_agent)."""

from ticketiq.model.client import ModelClient
from ticketiq.model.wire import ModelReply, ToolCallRequest

__all__ = ["ModelClient", "ModelReply", "ToolCallRequest"]
