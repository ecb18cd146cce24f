"""The stand-in MCP server: a notebook of notes in the stand-ins' database, served by the official SDK's
`MCPServer` (over Streamable HTTP at /mcp by vendors/mcp_endpoint.py, over stdio by standins/mcp_stdio.py).

Four tools, one of each kind a client must tell apart by its annotations:

    get_note(note_id)                               readOnlyHint
    set_note(note_id, text)                         idempotentHint, not destructive
    delete_note(note_id)                            destructiveHint, not idempotent
    add_note(notebook, text, request_id=None)       no annotations: a plain write; `request_id` dedupes it

and, while POST /_standin/mcp/extra-tool has it on, archive_note(note_id) (destructiveHint).

Every call passes the desk (vendors/intake.py) as a write of vendor `mcp`, operation the tool's name,
target the note or notebook, key the request_id, body the arguments: injected faults apply to it, and it
lands in /_standin/writes whatever it came to, reads included. A fault's refusal (429, 500,
500_after_apply) answers a JSON-RPC error: the server failed, not the tool. A tool's own failure (no such
note) answers a result with isError.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from ticketiq.standins.records import Answer, Effect, Session, Write, fingerprint
from ticketiq.standins.vendors.intake import Apply, Intake

VENDOR = "mcp"
SERVER_NAME = "ticketiq-standin-notes"
EXTRA_TOOL = "archive_note"

NoteId = Annotated[str, Field(description="The note's id.", min_length=1)]


class Note(BaseModel):
    note_id: str
    text: str


class NoteSet(BaseModel):
    note_id: str
    text: str
    created: bool = Field(description="True when the note did not exist before this call.")


class NoteDeleted(BaseModel):
    note_id: str
    existed: bool = Field(description="False: there was no such note, nothing was deleted.")


class NoteAdded(BaseModel):
    note_id: str
    notebook: str
    deduped: bool = Field(description="True: a repeat of request_id, answered with the first note's id.")


class NoteArchived(BaseModel):
    note_id: str
    existed: bool


def outcome(answer: Answer) -> CallToolResult:
    """The tool's result (its body as JSON text and as structuredContent), or the error the call answers: a
    fault's refusal is the server's failure (a JSON-RPC error), any other refusal the tool's (isError)."""
    if answer.status == 429 or answer.status >= 500:
        message = str(answer.body.get("error", "Internal server error")) if isinstance(answer.body, dict) else ""
        retry_after = answer.headers.get("Retry-After")
        data = {"status": answer.status, "retry_after_s": float(retry_after) if retry_after else None}
        raise MCPError(INTERNAL_ERROR, message or "Internal server error", data)
    if answer.effect is Effect.REFUSED:
        return CallToolResult(content=[TextContent(type="text", text=str(answer.body["error"]))], is_error=True)
    text = json.dumps(answer.body, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=answer.body)


class Notebook:
    """The tools' work: each call a `Write` through the intake's desk, applied in its transaction."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    async def _call(
        self, tool: str, target: str, key: str | None, arguments: dict[str, Any], apply: Apply
    ) -> CallToolResult:
        return outcome(await self.intake.answer(Write(VENDOR, tool, target, key, arguments), apply))

    async def get(self, note_id: str) -> CallToolResult:
        async def apply(session: Session) -> Answer:
            row = await session.fetch_one("standin.mcp_note_get", {"note_id": note_id})
            if row is None:
                return Answer(404, {"error": f"no note {note_id}"}, Effect.REFUSED)
            return Answer(200, {"note_id": note_id, "text": row["text"]}, Effect.APPLIED, note_id)

        return await self._call("get_note", note_id, None, {"note_id": note_id}, apply)

    async def set(self, note_id: str, text: str) -> CallToolResult:
        async def apply(session: Session) -> Answer:
            row = await session.fetch_one("standin.mcp_note_set", {"note_id": note_id, "text": text})
            assert row is not None  # an upsert always returns its row
            return Answer(200, {"note_id": note_id, "text": text, "created": row["created"]}, ref=note_id)

        arguments = {"note_id": note_id, "text": text}
        return await self._call("set_note", note_id, None, arguments, apply)

    async def delete(self, note_id: str) -> CallToolResult:
        async def apply(session: Session) -> Answer:
            row = await session.fetch_one("standin.mcp_note_delete", {"note_id": note_id})
            # Carried out either way; the status says whether there was a note to delete.
            return Answer(200 if row else 404, {"note_id": note_id, "existed": row is not None}, ref=note_id)

        return await self._call("delete_note", note_id, None, {"note_id": note_id}, apply)

    async def add(self, notebook: str, text: str, request_id: str | None) -> CallToolResult:
        arguments = {"notebook": notebook, "text": text, "request_id": request_id}
        content = {"notebook": notebook, "text": text}

        async def apply(session: Session) -> Answer:
            note_id = f"note_{uuid.uuid4().hex[:16]}"
            if request_id is not None:
                # Claimed for ever: a repeat however late is the same request.
                claim = await session.claim(VENDOR, notebook, request_id, note_id, float("inf"), content)
                if not claim.won and claim.fingerprint != fingerprint(content):
                    error = f"request_id {request_id} was used with a different text"
                    return Answer(422, {"error": error}, Effect.REFUSED, claim.ref)
                if not claim.won:
                    body = {"note_id": claim.ref, "notebook": notebook, "deduped": True}
                    return Answer(200, body, Effect.DEDUPED, claim.ref)
            await session.fetch_one("standin.mcp_note_add", {"note_id": note_id, "notebook": notebook, "text": text})
            return Answer(201, {"note_id": note_id, "notebook": notebook, "deduped": False}, ref=note_id)

        return await self._call("add_note", notebook, request_id, arguments, apply)

    async def archive(self, note_id: str) -> CallToolResult:
        async def apply(session: Session) -> Answer:
            row = await session.fetch_one("standin.mcp_note_archive", {"note_id": note_id})
            return Answer(200 if row else 404, {"note_id": note_id, "existed": row is not None}, ref=note_id)

        return await self._call(EXTRA_TOOL, note_id, None, {"note_id": note_id}, apply)


def notebook_server(intake: Intake) -> tuple[MCPServer, Notebook]:
    """The SDK's server with the four tools over `intake`'s store and faults."""
    book = Notebook(intake)
    server: MCPServer = MCPServer(
        SERVER_NAME,
        instructions="A notebook of notes kept by TicketIQ's stand-ins; every call is recorded.",
        version="1",
        log_level="WARNING",
    )

    @server.tool(annotations=ToolAnnotations(title="Read a note", read_only_hint=True))
    async def get_note(note_id: NoteId) -> Annotated[CallToolResult, Note]:
        """Answers the text of the note `note_id` (an error result when there is none)."""
        return await book.get(note_id)

    @server.tool(
        annotations=ToolAnnotations(
            title="Set a note", read_only_hint=False, idempotent_hint=True, destructive_hint=False
        )
    )
    async def set_note(
        note_id: NoteId, text: Annotated[str, Field(description="The note's new text.")]
    ) -> Annotated[CallToolResult, NoteSet]:
        """Sets the text of the note `note_id`, creating it if absent; the same arguments twice, the same state."""
        return await book.set(note_id, text)

    @server.tool(annotations=ToolAnnotations(title="Delete a note", destructive_hint=True, idempotent_hint=False))
    async def delete_note(note_id: NoteId) -> Annotated[CallToolResult, NoteDeleted]:
        """Deletes the note `note_id`; answers whether it existed."""
        return await book.delete(note_id)

    @server.tool()
    async def add_note(
        notebook: Annotated[str, Field(description="The notebook to append to.", min_length=1)],
        text: Annotated[str, Field(description="The new note's text.")],
        request_id: Annotated[
            str | None,
            Field(description="A key of this request: a repeat with the same one adds nothing and answers the "
                              "first note's id."),
        ] = None,
    ) -> Annotated[CallToolResult, NoteAdded]:  # fmt: skip
        """Appends a new note (a fresh id) to `notebook`; answers its id."""
        return await book.add(notebook, text, request_id)

    return server, book


async def switch_extra_tool(server: MCPServer, notebook: Notebook, enabled: bool) -> bool:
    """Adds or removes archive_note; True when the tool list changed."""
    present = any(tool.name == EXTRA_TOOL for tool in await server.list_tools())
    if enabled == present:
        return False
    if not enabled:
        server.remove_tool(EXTRA_TOOL)
        return True

    async def archive_note(note_id: NoteId) -> Annotated[CallToolResult, NoteArchived]:
        """Archives the note `note_id` (it stays, marked archived); answers whether it existed."""
        return await notebook.archive(note_id)

    server.add_tool(
        archive_note,
        name=EXTRA_TOOL,
        annotations=ToolAnnotations(title="Archive a note", destructive_hint=True, idempotent_hint=False),
    )
    return True
