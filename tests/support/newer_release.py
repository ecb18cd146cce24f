"""A process of the release after this one, for the tests of versioned checkpoints (engine/resume.py):
today's code, which writes checkpoints of the next state format and registers that it knows it, as a
release that changed its state's format would. Its states are today's JSON under the new number: what
matters to an older process is the number, which it must not read past.

Run as `python -m tests.support.newer_release serve --port N` from the repository (a fresh interpreter,
never the suite's fork server, which holds today's formats)."""

from __future__ import annotations

import sys

from ticketiq.engine import resume


def become_newer() -> None:
    resume.THIS_RELEASE = resume.Known(resume.THIS_RELEASE.state_format + 1, resume.THIS_RELEASE.seal_format)


if __name__ == "__main__":
    become_newer()
    from ticketiq.cli.main import main

    sys.exit(main())
