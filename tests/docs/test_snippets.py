"""Every code block of README.md and of the documentation site runs (tests/docs/snippets.py
says how a page's blocks are read): a snippet that stops working fails the suite. The
how-to guides are in test_snippets_howto.py."""

from __future__ import annotations

from pathlib import Path

from tests.docs.conftest import PAGES, TESTED, page_name, parametrize_pages, run_page
from tests.docs.snippets import Page

OTHERS = [page for page in TESTED if not page_name(page).startswith("docs/how-to/")]


def test_the_pages_have_snippets() -> None:
    """The collector finds the site's pages and their blocks (a collector that found
    nothing would pass every page)."""
    assert len(PAGES) > 30
    assert sum(page.blocks for page in PAGES) > 100
    assert sum(step.kind == "run" for page in PAGES for step in page.steps) > 80


@parametrize_pages(OTHERS)
def test_page_snippets_run(page: Page, page_url: str, tmp_path: Path) -> None:
    run_page(page, page_url, tmp_path)
