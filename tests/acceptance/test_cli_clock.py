"""Ages the CLI shows are computed on the database's clock, never the machine's: each
command runs on a machine whose clock is 5 hours ahead (tests/clock_ahead.py shifts it in
the CLI's process only), against the real database, whose clock is right."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import jobq
from tests.helpers import set_columns

ROOT = Path(__file__).resolve().parents[2]
AHEAD = 5 * 3600


def ahead(url: str, commands: Sequence[Sequence[str]], cwd: Path) -> list[str]:
    """The output of each ``jobq`` command, run at once with the clock AHEAD seconds on."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.clock_ahead", str(AHEAD), *args, "--database-url", url],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert (proc.returncode, err) == (0, ""), (proc.args, out, err)
        outputs.append(out)
    return outputs


def test_the_wrapper_moves_the_clock_ahead(tmp_path: Path) -> None:
    """Else the test below could not fail."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.clock_ahead", str(AHEAD), "--now"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    shifted = datetime.fromisoformat(done.stdout.strip())
    assert (shifted - datetime.now(UTC)).total_seconds() > AHEAD - 60


def seen_cell(listing: str, worker_id: str) -> tuple[str, str]:
    """The "last seen" and "state" cells of ``worker_id``'s line in a worker table."""
    line = next(line for line in listing.splitlines() if line.startswith(worker_id))
    match = re.search(r"  ((?:\d+[dhms] ?)+) ago\s+(alive|stale)", line)
    assert match is not None, line
    return match.group(1), match.group(2)


def test_ages_are_on_the_databases_clock(store: jobq.Store, tmp_path: Path, db_url: str) -> None:
    store.register_worker("clockwise", host="here", pid=1, queues=None, concurrency=1)
    now = store.dialect.now()
    fresh = store.enqueue("fresh", {})
    late = store.enqueue("late", {})
    for task_id, started in [(fresh, now), (late, store.dialect.now_plus(-120))]:
        set_columns(
            store,
            task_id,
            status="in_progress",
            attempt=1,
            locked_by="clockwise",
            started_at=started,
            locked_until=store.dialect.now_plus(3600),
            timeout=60,
        )
    status, workers, fresh_shown, late_shown = ahead(
        db_url, [["status"], ["workers"], ["show", str(fresh)], ["show", str(late)]], tmp_path
    )
    for listing in (status, workers):
        seen, state = seen_cell(listing, "clockwise")
        # Registered a moment ago, on the database's clock: seconds or minutes, not 5h.
        assert state == "alive" and not re.search(r"[dh]", seen), listing
    # A run started a moment ago is within its 60 s timeout, on the database's clock.
    assert "timed out" not in fresh_shown, fresh_shown
    # One started 2 minutes ago is past it, by minutes.
    note = re.search(r"timed out after 60 s and still running \(([^)]*)\)", late_shown)
    assert note is not None, late_shown
    assert re.fullmatch(r"\d+m( \d+s)?", note.group(1)), note.group(1)
