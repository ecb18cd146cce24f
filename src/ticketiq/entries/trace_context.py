"""The W3C trace context a request came with, kept for whatever run the request starts (runtime/tracing.py).

Every entry point starts runs in the task of the request that asked (the API, A2A, a webhook, a Teams
activity, the co-pilot), deep in its intake code; rather than thread a header through each, this pure
ASGI middleware notes the request's `traceparent` (when it has a well-formed one) in a context variable,
and `Engine.create_run` reads it there. A run started without one is its own trace.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.runtime import tracing


class TraceContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"traceparent":
                    token = tracing.INCOMING.set(value.decode("latin-1"))
                    try:
                        await self.app(scope, receive, send)
                    finally:
                        tracing.INCOMING.reset(token)
                    return
        await self.app(scope, receive, send)
