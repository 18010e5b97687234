"""manage.py migrate / jobq_migrate make jobq's tables; jobq_worker and `jobq worker --app
jobq.contrib.django.worker:app` run the project's tasks in real processes."""

from __future__ import annotations

import subprocess
import sys

from django.core.management import call_command
from django.db import connection
from django.tasks import TaskResultStatus
from shop import tasks

from jobq.contrib.django.settings import app_for
from jobq.engine import migrations
from tests.django.conftest import PROJECT, manage, project_env


def test_migrate_made_jobq_tables_at_jobqs_newest_revision() -> None:
    store = app_for({}).store
    store.check_schema()  # raises unless at HEAD
    folder = PROJECT.parents[2] / "jobq/contrib/django/migrations"
    last = sorted(path.stem for path in folder.glob("0*.py"))[-1]
    assert last.endswith(migrations.HEAD), "a jobq revision needs its Django migration"
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
    assert "jobq_tasks" in tables and "jobq_alembic_version" in tables


def test_jobq_migrate_is_migrate_jobq(capsys) -> None:
    call_command("jobq_migrate", verbosity=1)
    assert "No migrations to apply" in capsys.readouterr().out
    app_for({}).store.check_schema()


def test_jobq_worker_takes_the_options_of_jobq_worker() -> None:
    shown = manage("jobq_worker", "--help")
    assert shown.returncode == 0 and "jobq_worker" in shown.stdout
    for option in ("--queues", "--concurrency", "--burst", "--pool", "--processes"):
        assert option in shown.stdout
    emails = tasks.add.using(queue_name="emails").enqueue(1, 2)
    other = tasks.add.enqueue(3, 4)
    done = manage("jobq_worker", "--burst", "--burst-wait", "0", "--queues", "emails")
    assert done.returncode == 0, done.stderr
    assert tasks.add.get_result(emails.id).return_value == 3
    assert tasks.add.get_result(other.id).status == TaskResultStatus.READY  # not its queue


def test_jobq_worker_command_line_with_djangos_app_and_a_process_pool() -> None:
    result = tasks.add.enqueue(20, 22)
    done = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "worker", "--app", "jobq.contrib.django.worker:app",
         "--burst", "--burst-wait", "0", "--pool", "processes", "--concurrency", "1"],
        cwd=PROJECT, env=project_env(), capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tasks.add.get_result(result.id).return_value == 42


def test_jobq_worker_names_the_backend_it_runs() -> None:
    result = tasks.add.enqueue(1, 1)
    done = manage("jobq_worker", "--backend=default", "--burst", "--burst-wait", "0")
    assert done.returncode == 0, done.stderr
    assert tasks.add.get_result(result.id).return_value == 2
    missing = manage("jobq_worker", "--burst", "--backend")
    assert missing.returncode != 0
    assert "--backend needs the alias of a TASKS backend" in missing.stderr
    assert "Traceback" not in missing.stderr
    other = manage("jobq_worker", "--burst", "--backend", "immediate")
    assert other.returncode != 0
    assert "not jobq.contrib.django.JobqBackend" in other.stderr
    assert "Traceback" not in other.stderr
