"""The pages written from the code (scripts/reference.py) are current, the README is a start page, and every link of
the README and of docs/ resolves."""

from __future__ import annotations

import re

from scripts.reference import PAGES, stale
from testsupport.paths import ROOT

LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_generated_pages_are_current():
    assert stale() == [], "run python scripts/reference.py (the registry, Thresholds, the CLI or results.json changed)"
    assert set(PAGES) == {"docs/verdicts.md", "docs/cli.md", "docs/overhead.md"}


def test_the_readme_starts_a_newcomer_within_a_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 350
    first = next(i for i, line in enumerate(lines) if line.strip() == "trainmon")  # the command for "already running"
    assert first < 40 and "already running" in " ".join(lines[first - 4 : first]).lower()


def test_every_link_of_the_readme_and_the_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
            elif anchor and resolved.suffix == ".md":
                headings = re.findall(r"^#+ (.*)$", resolved.read_text(), flags=re.M)
                slugs = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}
                if anchor not in slugs:
                    broken.append(f"{page.relative_to(ROOT)} → {target} (no such heading)")
    assert not broken, broken
