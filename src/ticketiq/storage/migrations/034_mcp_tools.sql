-- beside: previous
-- Issue 33: an agent's tools may come from MCP servers (tools/mcp/). A trusted server's tool that says it is
-- idempotent and not destructive is classed `idempotent_write`: marked in doubt before it is sent, like every
-- write, and sent again with the same arguments when a resume finds it in doubt. Each process says how its
-- MCP servers answer it (`processes.mcp_servers`: name, transport, state, error, tools listed), which
-- GET /v1/processes and the console show.
--
-- The previous release runs beside it: it never writes the new class, and it cannot start with an agents
-- file that names an MCP server's tool (`notes.add_note` is an unknown tool to it), so it never drives a run
-- whose checkpoint holds one. Its statement registering a process names its columns, so the new column is
-- NULL for its processes (no MCP servers, as far as anyone can see). The check is added NOT VALID and then
-- validated: the validation reads the table under a lock that lets every write go on.
ALTER TABLE calls DROP CONSTRAINT calls_class_check;
ALTER TABLE calls ADD CONSTRAINT calls_class_check
    CHECK (class IN ('read', 'write', 'keyed_write', 'idempotent_write', 'delegation', 'remote_agent', 'subagent'))
    NOT VALID;
ALTER TABLE calls VALIDATE CONSTRAINT calls_class_check;

ALTER TABLE processes ADD COLUMN mcp_servers jsonb;
COMMENT ON COLUMN processes.mcp_servers IS 'How the MCP servers of the agents file answer this process: [{name, transport, where, state (connecting, ready, unreachable, stopped), error, tools}], written when a state changes. NULL: none declared, or a release before migration 034.';
