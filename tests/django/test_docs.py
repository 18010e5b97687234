"""docs/how-to/django.md: its files written out and used in the test project (the main
docs tests, on Python 3.11 without Django, only write them and parse its jobq commands)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import transaction
from django.tasks import TaskResultStatus

from tests.django.conftest import PROJECT, project_env
from tests.docs.snippets import read_page

PAGE = Path(__file__).parents[2] / "docs/how-to/django.md"


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    written = {}
    for step in read_page(PAGE).steps:
        if step.kind == "file":
            target = tmp_path / "docs_page" / step.title
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step.text)
            written[step.title] = step.text
    monkeypatch.syspath_prepend(str(tmp_path / "docs_page"))
    return written


def test_the_settings_of_the_page_configure_the_backend(files: dict[str, str]) -> None:
    namespace = {"INSTALLED_APPS": ["django.contrib.auth"]}
    exec(files["settings_jobq.py"], namespace)
    assert "jobq.contrib.django" in namespace["INSTALLED_APPS"]
    assert namespace["TASKS"]["default"]["BACKEND"] == settings.TASKS["default"]["BACKEND"]


def test_the_tasks_and_views_of_the_page_run(files: dict[str, str]) -> None:
    try:
        views = importlib.import_module("views")
        kept = views.sign_up(7)
        with pytest.raises(RuntimeError), transaction.atomic():
            views.sign_up_on_commit(8)
            raise RuntimeError("undo")
        page_tasks = importlib.import_module("tasks")
        assert page_tasks.send_welcome.get_result(kept).status == TaskResultStatus.READY
        importlib.import_module("urls")  # the page's URLconf imports
    finally:
        for name in ("views", "tasks", "urls"):
            sys.modules.pop(name, None)


def test_the_worker_commands_of_the_page_parse() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "worker", "--app", "jobq.contrib.django.worker:app",
         "--help"], cwd=PROJECT, env=project_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0 and "--burst" in shown.stdout
