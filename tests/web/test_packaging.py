"""The wheel ships the dashboard's templates and static files next to its code."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "jobq" / "web"


@pytest.mark.slow
def test_the_wheel_ships_templates_and_static_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
    )
    (wheel,) = tmp_path.glob("jobq-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(
        path.relative_to(ROOT).as_posix()
        for folder in ("templates", "static")
        for path in (WEB / folder).iterdir()
    )
    assert "jobq/web/templates/base.html" in shipped and "jobq/web/static/app.js" in shipped
    assert set(shipped) <= names
