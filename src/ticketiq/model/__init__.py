"""The chat-completions client the engine asks for each step."""

from ticketiq.model.client import ModelClient, ModelReply, ToolCallRequest

__all__ = ["ModelClient", "ModelReply", "ToolCallRequest"]
