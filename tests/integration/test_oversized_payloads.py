"""An argument or a result far over what the database takes is refused before its JSON is
built: a 1.1 GB argument once took 15 s and 3.2 GB of memory to refuse on PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.worker_processes import ROOT


def test_oversized_argument_and_result_are_refused_without_building_their_json(
    db_url: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.oversized_payloads", db_url],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["enqueue"].startswith("Argument 'blob' of task 't' takes more than ")
    assert "more than this database takes in one statement" in report["enqueue"]
    assert report["enqueue_many"].startswith(
        "Argument 'blob' of task 't' (entry 1 of the list) takes more than "
    )
    assert report["names"] == ["small"]  # nothing of the refused enqueues was written
    status, error = report["stored_end"]
    assert status == "failed" and error.startswith("result too large for this database: over ")
    status, error = report["run_end"]
    assert status == "failed" and "returned a result that cannot be stored: it takes more" in error
    # The value itself, and little more: its JSON (1.5 GB) was never built, not even once.
    growth = report["growth"]  # of the peak, after each step in turn
    assert all(grew < 2 * report["value_bytes"] for grew in growth.values()), growth
