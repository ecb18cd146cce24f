"""The console's sign-in rules (console/sessions.py): pure, no database."""

from __future__ import annotations

import pytest

from ticketiq.console import sessions


def test_a_session_secret_is_random_and_only_its_hash_is_kept() -> None:
    a, b = sessions.new_secret(), sessions.new_secret()
    assert a != b and sessions.well_formed(a)
    assert sessions.id_hash(a) != a and len(sessions.id_hash(a)) == 64


@pytest.mark.parametrize("value", [None, "", "short", "x" * 43 + "!", "tiq_" + "a" * 43, "a" * 44])
def test_a_cookie_not_shaped_like_a_secret_is_refused_before_the_database(value: str | None) -> None:
    assert not sessions.well_formed(value)


def test_csrf_tokens_must_match_exactly_and_be_present() -> None:
    secret = sessions.new_secret()
    assert sessions.csrf_ok(secret, secret)
    assert not sessions.csrf_ok(None, secret)
    assert not sessions.csrf_ok("", secret)
    assert not sessions.csrf_ok(secret, None)
    assert not sessions.csrf_ok(secret[:-1], secret)


def test_the_cookie_is_secure_exactly_over_https() -> None:
    assert sessions.secure_cookie("https")
    assert not sessions.secure_cookie("http")


@pytest.mark.parametrize(
    ("target", "goes"),
    [
        ("/console/runs/abc?x=1", "/console/runs/abc?x=1"),
        (None, "/console/runs"),
        ("https://evil.example/console", "/console/runs"),
        ("//evil.example/console", "/console/runs"),
        ("/consolex", "/console/runs"),
        ("/console/../v1/tokens", "/console/runs"),
        ("/console\\@evil", "/console/runs"),
        ("/v1/tokens", "/console/runs"),
        ("/console/runs\r\nSet-Cookie: x", "/console/runs"),
    ],
)
def test_after_sign_in_only_a_console_path_is_followed(target: str | None, goes: str) -> None:
    assert sessions.safe_next(target) == goes
