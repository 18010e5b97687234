"""The fixture and the runner the snippet tests share (test_snippets*.py: one module per
part of the site, so that pytest-xdist's --dist loadfile spreads them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import fresh_namespace_url
from tests.docs.snippets import Page, docstring_page, pages, read_page

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("page_runner.py")
PAGES = [read_page(path) for path in pages(ROOT)]
TESTED = [page for page in [*PAGES, docstring_page()] if page.steps]


def page_name(page: Page) -> str:
    return page.path.as_posix().removeprefix(f"{ROOT}/")


def parametrize_pages(chosen: list[Page]) -> Any:
    """Parametrize ``page`` and the ``page_url`` fixture with each of ``chosen``."""
    return pytest.mark.parametrize(
        ("page", "page_url"),
        [(page, page) for page in chosen],
        ids=[page_name(page) for page in chosen],
        indirect=["page_url"],
    )


@pytest.fixture
def page_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of the kind the page asks for."""
    page: Page = request.param
    if page.database == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobq.db'}"
        return
    with fresh_namespace_url(page.database) as url:
        yield url


def run_page(page: Page, page_url: str, tmp_path: Path) -> None:
    """Run every step of ``page`` in a process of its own, in a fresh directory, against
    ``page_url``; fail with what the runner said (the page and line of the failure)."""
    placeholder = page.options.get("url")
    steps = []
    for step in page.steps:
        text = step.text.replace(placeholder, page_url) if placeholder else step.text
        steps.append(asdict(step) | {"text": text})
    spec = {"page": page_name(page), "steps": steps, "timeout": 180}
    (tmp_path / "steps.json").write_text(json.dumps(spec))
    workdir = tmp_path / "page"
    workdir.mkdir()
    env = dict(os.environ, JOBQ_DATABASE_URL=page_url, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(tmp_path / "steps.json")],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
