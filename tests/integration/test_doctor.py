"""`ticketiq doctor`, run as its own process against the real stand-ins (and their database): one line a
finding, exit 0 when all is well and 1 when something is wrong; and its requests, like the app's, go
through HTTP_PROXY unless NO_PROXY names the host (a forward proxy on loopback records what it relays)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from pathlib import Path

import ticketiq
from tests.support.forward_proxy import forward_proxy
from tests.support.standins import Standins
from ticketiq.engine import seal
from ticketiq.storage.database import Database
from ticketiq.storage.seal_store import SealProbeStore

EMAIL = "ops-bot@example.com"
API_TOKEN = "ATATT-standin-" + "x" * 16
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _env(standins: Standins, home: Path, **extra: str) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_VARS and not k.startswith("TICKETIQ_")}
    return {
        **inherited,
        **standins.settings_env,
        "TICKETIQ_HOME": str(home),
        "TICKETIQ_SEAL_KEYS": f"k1:{secrets.token_hex(32)}",
        "TICKETIQ_JIRA_EMAIL": EMAIL,
        "TICKETIQ_JIRA_TOKEN": API_TOKEN,
        **extra,
    }


async def _doctor(env: dict[str, str]) -> tuple[int, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ticketiq.cli", "doctor", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode().splitlines()


async def _jira_knows_one_account(standins: Standins) -> None:
    await standins.options(jira_api_tokens={EMAIL: API_TOKEN}, jira_personal_tokens=["pat-of-data-center"])


async def test_doctor_exits_0_on_the_standins(standins: Standins, tmp_path: Path) -> None:
    await _jira_knows_one_account(standins)
    code, lines = await _doctor(_env(standins, tmp_path))
    assert code == 0, lines
    assert not [line for line in lines if line.startswith("WRONG")]
    assert f"ok    jira: Basic (Cloud) as {EMAIL}" in lines
    assert any(line.startswith("ok    database:") for line in lines)
    assert any(line.startswith("ok    model endpoint:") for line in lines)
    assert any(line.startswith("ok    agent ") for line in lines)
    assert "ok    teams bot connector: a token was granted" in lines
    assert "ok    teams graph: a token was granted" in lines
    # The sample's `notes`, at the URL the stand-ins print (TICKETIQ_STANDIN_MCP_URL), lists what noter names.
    assert f"ok    mcp notes: ready at {standins.mcp_url}, 4 tool(s)" in lines
    assert lines[-1] == "all is well"


async def test_doctor_names_a_wrong_jira_token_an_unreachable_mcp_server_and_an_unlisted_tool(
    standins: Standins, tmp_path: Path
) -> None:
    """One line each, in one run, and exit 1; the stand-ins' MCP server answers and lists its tools."""
    await _jira_knows_one_account(standins)
    agents = tmp_path / "agents.yaml"
    agents.write_text(
        "mcp_servers:\n"
        "  notes:\n    url: ${TICKETIQ_STANDIN_MCP_URL}\n"
        "  down:\n    url: http://127.0.0.1:1/mcp\n    headers: {Authorization: 'Bearer ${DOWN_TOKEN}'}\n"
        "agents:\n  noter:\n    model: noter\n    system_prompt: Note.\n"
        "    tools: [notes.get_note, notes.no_such_tool, down.ping]\n    owner: ops-bot\n    tenant: acme\n"
    )
    env = _env(standins, tmp_path, TICKETIQ_JIRA_TOKEN="not-the-token", TICKETIQ_AGENTS=str(agents),
               DOWN_TOKEN="down-secret-token-1234")  # fmt: skip
    code, lines = await _doctor(env)
    assert code == 1, lines
    wrong = [line for line in lines if line.startswith("WRONG")]
    assert len(wrong) == 3, lines
    assert wrong[0] == (
        f"WRONG jira: {standins.base_url}/jira/rest/api/3/myself refused the credentials (401): "
        "check TICKETIQ_JIRA_TOKEN and TICKETIQ_JIRA_EMAIL"
    )
    assert wrong[1] == (
        "WRONG mcp notes: MCP server notes does not list the tool no_such_tool (notes.no_such_tool); "
        "it lists: add_note, delete_note, get_note, set_note"
    )
    assert wrong[2].startswith("WRONG mcp down: unreachable at http://127.0.0.1:1/mcp: "), lines
    assert f"ok    mcp notes: ready at {standins.mcp_url}, 4 tool(s)" in lines
    assert lines[-1] == "3 problem(s)"
    assert not any("not-the-token" in line or "down-secret-token" in line for line in lines)  # no secret printed


async def test_doctor_starts_a_stdio_mcp_server_and_stops_it_before_it_exits(
    standins: Standins, tmp_path: Path
) -> None:
    await _jira_knows_one_account(standins)
    mark = secrets.token_hex(8)  # in the child's environment: found in /proc while it lives
    src = str(Path(ticketiq.__file__).parent.parent)
    database_url = standins.settings_env["TICKETIQ_DATABASE_URL"]
    env = {"TICKETIQ_STANDIN_DATABASE_URL": database_url, "PYTHONPATH": src, "DOCTOR_MARK": mark}
    server = {"command": [sys.executable, "-m", "ticketiq.standins.mcp_stdio"], "env": env}
    agent = {"model": "noter", "system_prompt": "Note.", "tools": ["notebook.get_note"], "owner": "ops-bot",
             "tenant": "acme"}  # fmt: skip
    agents = tmp_path / "agents.yaml"
    agents.write_text(json.dumps({"mcp_servers": {"notebook": server}, "agents": {"noter": agent}}))  # YAML reads JSON
    code, lines = await _doctor(_env(standins, tmp_path, TICKETIQ_AGENTS=str(agents)))
    assert code == 0, lines
    assert f"ok    mcp notebook: ready at {sys.executable}, 4 tool(s)" in lines
    assert not _processes_marked(mark)  # the doctor's child ended with it


def _processes_marked(mark: str) -> list[str]:
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"DOCTOR_MARK={mark}".encode() in environ.read_bytes():
                found.append(environ.parent.name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


async def test_doctor_takes_a_data_center_token_as_bearer(standins: Standins, tmp_path: Path) -> None:
    await _jira_knows_one_account(standins)
    env = _env(standins, tmp_path, TICKETIQ_JIRA_TOKEN="pat-of-data-center")
    del env["TICKETIQ_JIRA_EMAIL"]
    code, lines = await _doctor(env)
    assert code == 0, lines
    assert "ok    jira: Bearer (Data Center) as standin-bot" not in lines  # named by display name
    assert "ok    jira: Bearer (Data Center) as TicketIQ" in lines
    # The Cloud API token as Bearer is refused, as Jira Cloud refuses it.
    env["TICKETIQ_JIRA_TOKEN"] = API_TOKEN
    code, lines = await _doctor(env)
    assert code == 1, lines
    assert [line.split(":")[0] for line in lines if line.startswith("WRONG")] == ["WRONG jira"]


async def test_doctor_names_a_wrong_model_and_missing_seal_keys(standins: Standins, tmp_path: Path) -> None:
    env = _env(standins, tmp_path, TICKETIQ_MODEL="no-such-model")
    del env["TICKETIQ_SEAL_KEYS"]
    agents = tmp_path / "agents.yaml"
    agents.write_text(
        "agents:\n  helper:\n    system_prompt: Help.\n    tools: [jira_get_issue]\n"
        "    owner: ops-bot\n    tenant: acme\n"
    )
    env["TICKETIQ_AGENTS"] = str(agents)
    code, lines = await _doctor(env)
    assert code == 1, lines
    wrong = [line for line in lines if line.startswith("WRONG")]
    assert any(line.startswith("WRONG seal keys: TICKETIQ_SEAL_KEYS is unset") for line in wrong), lines
    assert any(line.startswith("WRONG agent helper: model 'no-such-model' is not among") for line in wrong), lines
    assert not (tmp_path / "seal.key").exists()  # the doctor made no key of its own


async def test_the_doctors_requests_go_through_http_proxy_unless_no_proxy_names_the_host(
    standins: Standins, tmp_path: Path
) -> None:
    await _jira_knows_one_account(standins)
    async with forward_proxy() as proxy:
        code, lines = await _doctor(_env(standins, tmp_path, HTTP_PROXY=proxy.url))
        assert code == 0, lines
        base = standins.base_url
        assert f"GET {base}/jira/rest/api/3/myself" in proxy.relayed
        assert f"GET {base}/v1/models" in proxy.relayed
        assert f"GET {base}/incidentio/v1/severities" in proxy.relayed
        relayed = len(proxy.relayed)
        code, lines = await _doctor(_env(standins, tmp_path, HTTP_PROXY=proxy.url, NO_PROXY="localhost,127.0.0.1"))
        assert code == 0, lines
        assert len(proxy.relayed) == relayed  # straight to the stand-ins: nothing more through the proxy


async def test_doctor_names_a_wrong_bot_password_and_an_unreachable_database(
    standins: Standins, tmp_path: Path
) -> None:
    env = _env(standins, tmp_path, TICKETIQ_TEAMS_APP_PASSWORD="not-the-password")
    env["TICKETIQ_DATABASE_URL"] = "postgresql://ticketiq:db-secret@127.0.0.1:1/nowhere"
    code, lines = await _doctor(env)
    assert code == 1, lines
    wrong = {line.split(":")[0]: line for line in lines if line.startswith("WRONG")}
    assert set(wrong) == {"WRONG database", "WRONG teams bot connector", "WRONG teams graph"}, lines
    assert "cannot reach postgresql://ticketiq:***@127.0.0.1:1/nowhere" in wrong["WRONG database"]
    assert "TICKETIQ_TEAMS_APP_PASSWORD" in wrong["WRONG teams bot connector"]
    assert not any("db-secret" in line or "not-the-password" in line for line in lines)  # no secret printed


async def test_doctor_checks_the_seal_keys_against_the_clusters_probe(standins: Standins, tmp_path: Path) -> None:
    cluster = f"k1:{secrets.token_hex(32)}"
    db = Database(standins.settings_env["TICKETIQ_DATABASE_URL"], min_size=1, max_size=1)
    await db.open()
    try:
        await SealProbeStore(db).offer(*seal.probe(seal.parse_keys(cluster)))  # as the first process does
    finally:
        await db.close()
    code, lines = await _doctor(_env(standins, tmp_path, TICKETIQ_SEAL_KEYS=cluster))
    assert code == 0, lines
    assert "ok    seal keys: signing with k1; they verify the cluster's probe" in lines
    other = f"k1:{secrets.token_hex(32)}"  # the same id, another secret: a host given the wrong keys
    code, lines = await _doctor(_env(standins, tmp_path, TICKETIQ_SEAL_KEYS=other))
    assert code == 1, lines
    [wrong] = [line for line in lines if line.startswith("WRONG")]
    assert wrong.startswith("WRONG seal keys: key id 'k1' in TICKETIQ_SEAL_KEYS has another secret"), lines
    assert not any(other.split(":")[1] in line or cluster.split(":")[1] in line for line in lines)
