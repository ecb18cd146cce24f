"""Going live: Jira's two ways of taking a token, the stand-in Jira checking them as Jira does, and which
requests go through a proxy (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY)."""

from __future__ import annotations

import base64

import pytest

from ticketiq.standins.vendors.intake import StandinOptions
from ticketiq.standins.vendors.jira import account
from ticketiq.tools.jira import authorization
from ticketiq.tools.vendor_pool import route


def test_jira_cloud_takes_email_and_api_token_as_basic_and_data_center_a_bearer_token() -> None:
    basic = authorization("ops@example.com", "tok:en")
    assert basic == "Basic " + base64.b64encode(b"ops@example.com:tok:en").decode()
    assert authorization(None, "pat") == "Bearer pat"
    assert authorization("", "pat") == "Bearer pat"


def test_the_standin_jira_takes_only_the_credentials_of_its_accounts() -> None:
    knows = StandinOptions(jira_api_tokens={"ops@example.com": "tok:en"}, jira_personal_tokens=["pat"])
    assert account(authorization("ops@example.com", "tok:en"), knows) == "ops@example.com"
    assert account("Bearer pat", knows) == "pat"
    assert account(authorization("ops@example.com", "wrong"), knows) is None
    assert account(authorization("other@example.com", "tok:en"), knows) is None
    assert account("Bearer tok:en", knows) is None  # a Cloud API token is no Bearer token
    assert account(authorization(None, "pat").replace("Bearer", "Basic"), knows) is None
    assert account("Basic !!!", knows) is None
    assert account("", knows) is None
    # Knowing no accounts, it takes any credential that came (older tests send a made-up one).
    assert account("Bearer anything", StandinOptions()) == "anyone"
    assert account("", StandinOptions()) is None


PROXIES = {"http": "http://proxy:3128", "https": "http://secure-proxy:3128"}


@pytest.mark.parametrize(
    ("scheme", "host", "port", "no_proxy", "expected"),
    [
        ("http", "jira.example.com", 80, "", "http://proxy:3128"),
        ("https", "jira.example.com", 443, "", "http://secure-proxy:3128"),
        ("https", "jira.example.com", 443, "example.com", None),  # a domain names its subdomains
        ("https", "example.com", 443, ".example.com", None),
        ("https", "notexample.com", 443, "example.com", "http://secure-proxy:3128"),
        ("https", "jira.example.com", 443, "jira.example.com:8443", "http://secure-proxy:3128"),
        ("https", "jira.example.com", 8443, "jira.example.com:8443", None),
        ("http", "10.1.2.3", 80, "10.0.0.0/8", None),
        ("http", "11.1.2.3", 80, "10.0.0.0/8", "http://proxy:3128"),
        ("http", "127.0.0.1", 80, " localhost , 127.0.0.1 ", None),
        ("http", "anything", 80, "*", None),
    ],
)
def test_a_request_goes_through_the_proxy_of_its_scheme_unless_no_proxy_names_its_host(
    scheme: str, host: str, port: int, no_proxy: str, expected: str | None
) -> None:
    assert route(scheme, host, port, {**PROXIES, "no": no_proxy}) == expected


def test_all_proxy_serves_where_the_scheme_has_none_and_a_bare_address_is_http() -> None:
    assert route("https", "h", 443, {"all": "proxy:3128"}) == "http://proxy:3128"
    assert route("https", "h", 443, {}) is None
