"""Which checkpoints this release resumes (engine/resume.py, versioned checkpoints), and a seal of a newer format never
checked as if it were ours (seal.py): it would look tampered, and the run would be failed."""

from __future__ import annotations

import pytest

from ticketiq.engine import resume, seal

CHAIN = seal.Chain("run-1", 3, 2, 1, "prev")


def test_this_release_resumes_its_own_formats_and_the_previous_releases() -> None:
    assert resume.format_unknown(resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format) is None
    assert resume.format_unknown(1, 1) is None  # the previous release's states, sealed before the chain


def test_a_newer_state_or_seal_format_is_named_with_what_this_release_knows() -> None:
    state, seal_format = resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format
    why = resume.format_unknown(state + 1, seal_format)
    assert why == (
        f"its checkpoint has state format {state + 1} and seal format {seal_format}; this release knows state "
        f"formats up to {state} and seal formats up to {seal_format}"
    )
    assert resume.format_unknown(resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format + 1) is not None
    newer = resume.Known(resume.THIS_RELEASE.state_format + 1, resume.THIS_RELEASE.seal_format)
    assert resume.format_unknown(resume.THIS_RELEASE.state_format + 1, resume.THIS_RELEASE.seal_format, newer) is None


def test_a_seal_of_a_format_this_release_does_not_know_is_never_verified_as_ours() -> None:
    keys = seal.parse_keys("k1:secret")
    mac, key_id = seal.seal(keys, CHAIN, "{}")
    seal.verify(keys, CHAIN, "{}", mac, key_id, resume.THIS_RELEASE.seal_format)
    with pytest.raises(ValueError, match="seal format 3 is not one this release knows"):
        seal.verify(keys, CHAIN, "{}", mac, key_id, 3)
