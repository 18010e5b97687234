"""The built wheel ships the migrations; the examples run as a user would run them."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from jobq.engine import migrations

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_installed_wheel_migrates_an_empty_sqlite_database(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
    )
    (wheel,) = dist.glob("jobq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "jobq/_migrations/env.py" in names
    assert "jobq/_migrations/versions/0001_tasks.py" in names

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    subprocess.run([bin_dir / "pip", "install", "-q", str(wheel)], check=True)

    # Run away from the checkout so that only the installed copy can be imported.
    work = tmp_path / "elsewhere"
    work.mkdir()
    clean_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    clean_env.pop("JOBQ_DATABASE_URL", None)
    done = subprocess.run(
        [bin_dir / "jobq", "migrate", "--database-url", "sqlite:///fresh.db"],
        cwd=work, env=clean_env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    where = subprocess.run(
        [bin_dir / "python", "-c",
         "import jobq.engine.migrations as m; print(m.script_location())"],
        cwd=work, env=clean_env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert str(env_dir) in where.stdout and "_migrations" in where.stdout
    with sqlite3.connect(work / "fresh.db") as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        version = db.execute("SELECT version_num FROM jobq_alembic_version").fetchone()
    assert {"jobq_tasks", "jobq_workers", "jobq_alembic_version"} <= tables
    assert version == (migrations.head(),)


def run_example(tmp_path: Path, *args: str) -> str:
    """Run a command from the checkout's examples the way README does; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBQ_DATABASE_URL", None)  # each example uses its own ./examples-*.db in tmp_path
    done = subprocess.run(
        [sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def quickstart_enqueue(tmp_path: Path) -> None:
    """README's first command: the quickstart's tasks enqueued."""
    out = run_example(tmp_path, str(ROOT / "examples" / "quickstart.py"), "enqueue")
    assert "enqueued 7 tasks" in out


def quickstart_worker_and_results(tmp_path: Path) -> None:
    """README's two other commands: a burst worker, then every quickstart task's end."""
    run_example(tmp_path, "-m", "jobq.cli", "worker", "--app", "examples.quickstart:app", "--burst")
    results = run_example(tmp_path, str(ROOT / "examples" / "quickstart.py"), "results")
    assert "add{'a': 2, 'b': 3}: done -> 5" in results
    assert "shout{'text': 'hello'}: done -> 'HELLO!'" in results
    assert "shout{'text': ''}: failed -> 'ValueError: nothing to shout'" in results
    assert "count_words{'text': 'the whole state lives in SQL rows'}: done -> 7" in results
    assert "not registered" not in results


def test_readme_quickstart_runs_a_real_worker(tmp_path: Path) -> None:
    quickstart_enqueue(tmp_path)
    quickstart_worker_and_results(tmp_path)
    assert (tmp_path / "examples-quickstart.db").exists()
    assert not (tmp_path / "jobq.db").exists()


def test_examples_run_in_one_directory_keep_to_their_own_tasks(tmp_path: Path) -> None:
    """The quickstart's tasks wait for its worker while two other examples run their own
    workers in the same directory: no worker meets (and fails as not registered) a task
    of another example, and the quickstart still ends as it does alone."""
    quickstart_enqueue(tmp_path)
    retries = run_example(tmp_path, str(ROOT / "examples" / "retries.py"))
    assert "done, 3 attempt(s): monthly ready" in retries
    transactional = run_example(tmp_path, str(ROOT / "examples" / "transactional_enqueue.py"))
    assert transactional.count(": done -> 'welcome mail") == 1, transactional
    assert "not registered" not in retries + transactional
    quickstart_worker_and_results(tmp_path)


def test_transactional_enqueue_example(tmp_path: Path) -> None:
    out = run_example(tmp_path, str(ROOT / "examples" / "transactional_enqueue.py"))
    assert "task 1: done -> 'welcome mail for user 1 sent to ada@example.com'" in out
    assert "users: ['ada@example.com']" in out and "bob@example.com'" not in out


def test_a_second_run_of_an_example_starts_afresh(tmp_path: Path) -> None:
    """Its tasks and users from the first run are gone: one user, one welcome mail."""
    example = str(ROOT / "examples" / "transactional_enqueue.py")
    run_example(tmp_path, example)
    again = run_example(tmp_path, example)
    assert "users: ['ada@example.com']" in again, again
    mails = [line for line in again.splitlines() if line.startswith("task ")]
    assert len(mails) == 1, again
    assert mails[0].endswith(": done -> 'welcome mail for user 1 sent to ada@example.com'")


def test_async_tasks_example(tmp_path: Path) -> None:
    out = run_example(tmp_path, str(ROOT / "examples" / "async_tasks.py"))
    assert out.count(": done -> 'page") == 10
    assert "task 11: failed -> 'timed out after 2 s'" in out


def test_retries_example(tmp_path: Path) -> None:
    out = run_example(tmp_path, str(ROOT / "examples" / "retries.py"))
    assert "done, 3 attempt(s): a.png uploaded after 3 attempt(s)" in out
    assert "failed, 4 attempt(s): ConnectionError: upload of b.png failed (attempt 4)" in out
    assert "done, 3 attempt(s): monthly ready" in out


def test_workflows_example(tmp_path: Path) -> None:
    out = run_example(tmp_path, str(ROOT / "examples" / "workflows.py"))
    assert "workflow 1: '9 words'" in out
    assert "workflow 2: Task 7 was cancelled: cancelled: task 6 (fetch), which it waits" in out
    assert "task 6 fetch: failed: ConnectionError: https://example.invalid is unreachable" in out


def test_cli_migrate_reports_problems_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "migrate", "--database-url",
         "postgresql://u:hunter2secret@127.0.0.1:1/orders"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("error: Cannot connect to database 'orders' on 127.0.0.1:1")
    assert "Traceback" not in done.stderr and "hunter2secret" not in done.stderr
