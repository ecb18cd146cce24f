"""The vendor and model transport behind a company's network: an https:// vendor reached through
HTTPS_PROXY (a CONNECT tunnel on a real forward proxy) and trusted by a private CA named in SSL_CERT_FILE,
as httpx and the OpenAI SDK would; refused without that CA; and straight when NO_PROXY names the host."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from fastapi import FastAPI

from tests.support.forward_proxy import forward_proxy
from tests.support.http import PromptServer, started, stopped
from tests.support.mcp_counter import Counter, serve_http
from tests.support.standins import Standins
from ticketiq.model import ModelClient
from ticketiq.settings import Settings
from ticketiq.standins.server import listen
from ticketiq.tools import vendor_pool
from ticketiq.tools.base import CallContext, Registry
from ticketiq.tools.mcp_tools import McpServers
from ticketiq.tools.vendor_pool import VendorTransport
from ticketiq.values.mcp_servers import parse

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")


def _private_ca(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for localhost, its key): a company's own CA, unknown to certifi."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "TicketIQ test private CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@contextlib.asynccontextmanager
async def _tls_vendor(cert: Path, key: Path) -> AsyncIterator[str]:
    app = FastAPI()

    @app.get("/rest/api/3/myself")
    async def myself() -> dict[str, str]:
        return {"accountId": "over-tls"}

    sock = listen(0)
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                            ssl_certfile=str(cert), ssl_keyfile=str(key))  # fmt: skip
    server = PromptServer(config)
    try:
        task = await started(server, sock)
    except BaseException:
        sock.close()
        raise
    try:
        yield f"https://localhost:{sock.getsockname()[1]}"
    finally:
        await stopped(server, task)
        sock.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    vendor_pool._verified.cache_clear()  # made once a process: made again under this test's environment
    try:
        yield monkeypatch
    finally:
        vendor_pool._verified.cache_clear()


async def _get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(transport=VendorTransport(2), timeout=10) as client:
        return await client.get(url)


async def test_an_https_vendor_is_reached_through_the_proxy_and_trusted_by_the_private_ca(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    ca, cert, key = _private_ca(tmp_path)
    async with _tls_vendor(cert, key) as base, forward_proxy() as proxy:
        port = base.rsplit(":", 1)[1]
        # No private CA: the vendor's certificate is refused (certifi's roots do not know the CA).
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await _get(f"{base}/rest/api/3/myself")
        clean_env.setenv("SSL_CERT_FILE", str(ca))
        vendor_pool._verified.cache_clear()
        clean_env.setenv("HTTPS_PROXY", proxy.url)
        reply = await _get(f"{base}/rest/api/3/myself")
        assert reply.status_code == 200
        assert reply.json() == {"accountId": "over-tls"}
        assert proxy.relayed == [f"CONNECT localhost:{port}"]
        # NO_PROXY names the host: straight to it, the proxy sees nothing more.
        clean_env.setenv("NO_PROXY", "localhost")
        reply = await _get(f"{base}/rest/api/3/myself")
        assert reply.status_code == 200
        assert proxy.relayed == [f"CONNECT localhost:{port}"]


async def test_a_model_step_goes_through_http_proxy_as_the_app_sends_it(
    clean_env: pytest.MonkeyPatch, standins: Standins
) -> None:
    """The model client on the app's transport (process.py): its chat completion relayed by the proxy."""
    async with forward_proxy() as proxy:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        client = ModelClient(standins.settings(), transport=VendorTransport(2))
        try:
            reply = await client.complete(
                model="triage", messages=[{"role": "user", "content": "Checkout fails, see OPS-7"}], tools=[]
            )
        finally:
            await client.close()
    assert [call.name for call in reply.tool_calls] == ["jira_get_issue"]
    assert proxy.relayed == [f"POST {standins.base_url}/v1/chat/completions"]


async def test_an_mcp_servers_requests_go_through_http_proxy(clean_env: pytest.MonkeyPatch) -> None:
    """An MCP server's session (tools/mcp_link.py, the SDK's Streamable HTTP client on httpx2) honours the
    proxy variables as the app's other clients do: initialize, the listing and a call, all relayed."""
    counter = Counter()
    async with serve_http(counter) as url, forward_proxy() as proxy:
        clean_env.setenv("HTTP_PROXY", proxy.url)
        servers = McpServers(parse({"counter": {"url": url}}, "agents.yaml"))
        await servers.start(10)
        try:
            registry = Registry()
            servers.register(registry, [])
            async with httpx.AsyncClient() as http:
                ctx = CallContext(run_id="r", tool="counter__bump", args={"amount": 2}, key="k", http=http,
                                  settings=Settings())  # fmt: skip
                outcome = await registry.tools["counter__bump"].executor(ctx)
        finally:
            await servers.stop()
    assert outcome.result == {"count": 2}, outcome
    assert counter.calls == [("bump", {"amount": 2, "request_id": ""})]
    assert proxy.relayed.count(f"POST {url}") >= 3, proxy.relayed  # initialize, tools/list, tools/call (and more)
