"""A worker starts only on a database at this jobq's newest revision, and `jobq migrate`s
started together (a deploy starting many pods) take turns, every one of them succeeding.

Both are checked as a user meets them: `jobq` commands in subprocesses, on every database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.base import Dialect
from jobq.engine import migrations
from tests.conftest import _drop_jobq_tables
from tests.migrations.rows import old_revision_store
from tests.migrations.test_migration_0006 import at_revision

ROOT = Path(__file__).resolve().parents[2]
#: Seconds any one command may take: far above what it needs, only there to end a hang.
PATIENCE = 60

# One `jobq migrate` that imports everything first, says "ready", and runs when told to:
# the test releases all of them at once, so that they really race.
MIGRATE_ON_CUE = """
import sys
import jobq.cli
import jobq.engine.migrations  # Alembic's import is paid before the start line
print("ready", flush=True)
sys.stdin.readline()
jobq.cli.main(["migrate", "--database-url", sys.argv[1]])
"""


def env() -> dict[str, str]:
    environ = {**os.environ, "PYTHONPATH": str(ROOT)}
    environ.pop("JOBQ_DATABASE_URL", None)
    return environ


def run_worker(url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`jobq worker --burst` on ``url``, waited for (at most PATIENCE seconds)."""
    args = ["worker", "--app", "tests.apps.mixed:app", "--burst", "--database-url", url]
    return subprocess.run(
        [sys.executable, "-m", "jobq.cli", *args],
        cwd=cwd, env=env(), capture_output=True, text=True, timeout=PATIENCE,
    )  # fmt: skip


def only_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a command that refused to run printed (status 1, no traceback)."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def revision_of(url: str) -> str | None:
    store = jobq.Store(url)
    try:
        with store.engine.connect() as conn:
            return migrations.current(conn)
    finally:
        store.dispose()


# --- a worker on a database that is not at head ---------------------------------------


def test_a_worker_on_an_older_revision_says_to_migrate_and_exits(
    empty_url: str, tmp_path: Path
) -> None:
    """At 0005 (no limit tables) a worker used to retry reading the limits forever."""
    store = old_revision_store(empty_url)
    at_revision(store, "0005")
    store.enqueue("ok", {}, lease=30)  # until 0007 a row must hold its lease
    store.dispose()
    line = only_error_line(run_worker(empty_url, tmp_path))
    assert "run `jobq migrate`" in line
    assert revision_of(empty_url) == "0005"  # the worker changed nothing


def test_a_worker_on_an_unmigrated_database_says_to_migrate(empty_url: str, tmp_path: Path) -> None:
    assert "run `jobq migrate`" in only_error_line(run_worker(empty_url, tmp_path))


def test_a_worker_on_a_newer_revision_says_to_upgrade_jobq(db_url: str, tmp_path: Path) -> None:
    store = jobq.Store(db_url)
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'"))
    store.dispose()
    line = only_error_line(run_worker(db_url, tmp_path))
    assert "'9999'" in line and "upgrade jobq" in line
    with pytest.raises(jobq.SchemaTooNew):  # nor does migrate touch it
        jobq.Store(db_url).migrate()
    assert revision_of(db_url) == "9999"


def test_a_worker_at_head_starts(db_url: str, tmp_path: Path) -> None:
    done = run_worker(db_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "started" in done.stderr and "alembic" not in done.stderr


# --- migrations started together -------------------------------------------------------


def migrate_together(url: str, count: int, cwd: Path) -> list[subprocess.CompletedProcess[str]]:
    """``count`` `jobq migrate` processes on ``url``, released at the same moment."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    command = [sys.executable, "-c", MIGRATE_ON_CUE, url]
    procs = [
        subprocess.Popen(command, cwd=cwd, env=env(), text=True, **pipes) for _ in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=PATIENCE)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        done = []
        for proc in procs:
            out, err = proc.communicate(timeout=PATIENCE)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return done
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("round_", range(3))
def test_migrates_started_together_all_succeed(empty_url: str, tmp_path: Path, round_: int) -> None:
    """Each round starts from an empty database (empty_url drops the tables before and
    after), so the first migration's CREATE TABLEs race the others'."""
    _drop_jobq_tables(empty_url)
    for done in migrate_together(empty_url, 4, tmp_path):
        assert done.returncode == 0, done.stderr
        assert done.stderr == "" and done.stdout.startswith("migrated "), done.stderr
    assert revision_of(empty_url) == migrations.head()
    store = jobq.Store(empty_url)
    store.check_schema()
    task_id = store.enqueue("t", {})
    assert [task.id for task in store.capture(1, worker_id="w")] == [task_id]
    store.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_a_migration_that_cannot_get_the_lock_in_time_says_so(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock is held by another session until released, then free for the next."""
    monkeypatch.setattr(Dialect, "migration_lock_wait", 0.5)
    holder, waiter = jobq.Store(empty_url), jobq.Store(empty_url)
    refused = pytest.raises(jobq.LockNotAcquired, match=r"'jobq migrate' within 0\.5 s")
    with holder.engine.connect() as conn, holder.dialect.migration_lock(conn), refused:
        waiter.migrate()
    assert revision_of(empty_url) is None
    waiter.migrate()
    assert revision_of(empty_url) == migrations.head()
    holder.dispose()
    waiter.dispose()


def test_a_migration_lock_is_released_when_the_migration_fails(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = jobq.Store(empty_url)

    def fail(conn: sa.Connection, revision: str = "head") -> None:
        raise jobq.JobqError("the migration failed")

    monkeypatch.setattr(migrations, "upgrade", fail)
    with pytest.raises(jobq.JobqError, match="the migration failed"):
        store.migrate()
    monkeypatch.undo()
    monkeypatch.setattr(Dialect, "migration_lock_wait", 5.0)
    other = jobq.Store(empty_url)  # another session: it waits for a lock left held
    other.migrate()
    assert revision_of(empty_url) == migrations.head()
    store.dispose()
    other.dispose()
