"""The README is the front door (issue 33, part 5): short, the two commands first, and a table of contents
that reaches every page under docs/ and every section moved there. Every relative link of the README and
of docs/*.md names a file that exists and, with `#anchor`, a heading of that file, by GitHub's anchors: a
moved section whose links broke is found here, not by a reader."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The pages that hold the old README's sections: each of their sections is reached from the README's
# table of contents and from the page's own. (tools.md is another's to grow: only the page is required.)
MOVED = ("architecture.md", "operate.md", "crash-resume.md", "entry-points.md", "reference.md", "testing.md")

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (github-slugger): the rendered text, lower case, every character but
    letters, digits, `-`, `_` and spaces dropped, each space a `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")  # HTML tags; code spans keep their text
    text = re.sub(r"(\*\*|__|\*|~~)", "", text)  # emphasis markers
    kept = "".join(c for c in text.strip().lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, a repeated one as GitHub numbers it (`-1`, `-2`, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in _HEADING.finditer(_FENCE.sub("", markdown)):
        base = result = slug(match.group(2))
        while result in seen:
            seen[base] += 1
            result = f"{base}-{seen[base]}"
        seen[result] = 0
        found.add(result)
    return found


def links(markdown: str) -> list[str]:
    """The targets of the inline links and images, outside code blocks and code spans."""
    prose = _CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), _FENCE.sub("", markdown))
    return [unquote(m.group(1)) for m in _LINK.finditer(prose)]


def relative_links(page: Path) -> list[tuple[Path, str]]:
    """(the file, the anchor or '') of each link to something in this repository."""
    found = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:: not ours to check
            continue
        path, _, anchor = target.partition("#")
        found.append(((page.parent / path).resolve() if path else page.resolve(), anchor))
    return found


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_slug_follows_github() -> None:
    assert slug("Who may do what") == "who-may-do-what"
    assert slug("`Idempotency-Key` everywhere") == "idempotency-key-everywhere"
    assert slug("`TICKETIQ_CRASH_RESUME_ENTRIES`") == "ticketiq_crash_resume_entries"
    assert slug("The edge's configuration") == "the-edges-configuration"
    assert slug("1. What one run costs the database") == "1-what-one-run-costs-the-database"
    assert slug("Mode `kill`: passed") == "mode-kill-passed"
    assert slug("Deploys: replacing the app processes") == "deploys-replacing-the-app-processes"
    assert slug("The demo, run by hand") == "the-demo-run-by-hand"
    assert slug("A [linked](x.md) **bold** word") == "a-linked-bold-word"
    assert anchors("## Setup\n## Setup\n```\n# not a heading\n```\n## Setup\n") == {"setup", "setup-1", "setup-2"}


def test_links_skip_code() -> None:
    text = "[a](a.md) `[b](b.md)`\n```\n[c](c.md)\n```\n![d](d.png) [`e`](e.md#x) [f](https://x.org)"
    assert links(text) == ["a.md", "d.png", "e.md#x", "https://x.org"]


def test_readme_is_short_and_opens_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move sections into docs/"
    opening = "\n".join(lines[:20])
    assert "make demo" in opening and "make test" in opening, opening


def test_readme_links_every_docs_page_and_every_moved_section() -> None:
    linked = set(relative_links(README))
    reached = {path for path, _ in linked}
    missing = [page.name for page in sorted(DOCS.glob("*.md")) if page.resolve() not in reached]
    assert not missing, f"docs pages the README's table of contents does not link: {missing}"
    for name in MOVED:
        page = (DOCS / name).resolve()
        sections = {slug(m.group(2)) for m in _HEADING.finditer(_FENCE.sub("", page.read_text()))
                    if len(m.group(1)) == 2}  # fmt: skip
        unlinked = sorted(sections - {anchor for path, anchor in linked if path == page})
        assert not unlinked, f"sections of docs/{name} the README does not link: {unlinked}"
        own = {anchor for path, anchor in relative_links(page) if path == page}
        assert not sections - own, f"sections missing from the table of contents of docs/{name}: {sections - own}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for path, anchor in relative_links(page):
        if not path.exists():
            broken.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: no such file")
        elif anchor and (path.suffix != ".md" or anchor not in anchors(path.read_text())):
            broken.append(f"{path.relative_to(ROOT)}#{anchor}: no such heading")
    assert not broken, broken
