"""Every code block of the how-to guides (docs/how-to/) runs: see test_snippets.py."""

from __future__ import annotations

from pathlib import Path

from tests.docs.conftest import TESTED, page_name, parametrize_pages, run_page
from tests.docs.snippets import Page

HOWTO = [page for page in TESTED if page_name(page).startswith("docs/how-to/")]


@parametrize_pages(HOWTO)
def test_howto_snippets_run(page: Page, page_url: str, tmp_path: Path) -> None:
    run_page(page, page_url, tmp_path)
