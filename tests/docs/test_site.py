"""The documentation site builds with ``mkdocs build --strict`` (no broken link, no
reference that does not resolve), and its reference is complete: every name of
``jobq.__all__`` and every ``jobq`` command has its entry."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

import jobq
from jobq.cli import main as jobq_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def anchors(page: Path) -> set[str]:
    return set(re.findall(r'id="([^"]+)"', page.read_text(encoding="utf-8")))


def command_paths(command: click.Command, prefix: str = "jobq") -> list[str]:
    """``jobq``, ``jobq worker``, ``jobq queues pause``...: every command of the CLI."""
    paths = [prefix]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                paths += command_paths(sub, f"{prefix} {name}")
    return paths


def test_every_public_name_is_in_the_reference(site: Path) -> None:
    documented = anchors(site / "reference/api/index.html") | anchors(
        site / "reference/exceptions/index.html"
    )
    missing = [name for name in jobq.__all__ if f"jobq.{name}" not in documented]
    assert not missing, f"not in docs/reference/api.md nor exceptions.md: {missing}"


def test_every_command_is_in_the_reference(site: Path) -> None:
    documented = anchors(site / "reference/cli/index.html")
    paths = command_paths(jobq_command)
    assert len(paths) > 30
    missing = [path for path in paths if path.replace(" ", "-") not in documented]
    assert not missing, f"not in docs/reference/cli.md: {missing}"


def test_every_page_is_in_the_navigation(site: Path) -> None:
    """A page left out of mkdocs.yml's nav is built but no reader finds it."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs").rglob("*.md")]
    assert [page for page in pages if page not in nav] == []


def test_the_readme_is_a_landing_page() -> None:
    """README.md stays a landing page under 10 KB that links into the site, with the two
    commands .ci/run and the packaging tests read from it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode()) < 10_000
    assert "Run the whole test suite" in readme
    assert "examples/quickstart.py enqueue" in readme
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)", readme))
    assert {"docs/getting-started/quickstart.md", "docs/reference/api.md"} <= linked
    assert all((ROOT / path).is_file() for path in linked)
