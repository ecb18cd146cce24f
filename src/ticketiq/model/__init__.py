"""The chat-completions client the engine asks for each step.

May import only values, runtime and the base modules (settings, errors)."""

from ticketiq.model.client import ModelClient
from ticketiq.model.wire import ModelReply, ToolCallRequest

__all__ = ["ModelClient", "ModelReply", "ToolCallRequest"]
