"""Django's own contract for task backends, on JobqBackend.

The ground that Django's tests of its backends (django/django tests/tasks: test_tasks.py,
test_immediate_backend.py, test_dummy_backend.py, test_custom_backend.py) and the
backport's of its database backend (RealOrangeOne/django-tasks
tests/tests/test_database_backend.py) cover, asserted of jobq's rows and of a real worker
process: every run here goes through ONE burst worker. Where jobq differs (worker_ids of
ended attempts, the traceback of a SystemExit, a read-back task's run_after), the test says
what jobq does and docs/how-to/django.md says so too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from asgiref.sync import async_to_sync
from django.core import checks
from django.db import connection, transaction
from django.tasks import (
    Task,
    TaskResult,
    TaskResultStatus,
    default_task_backend,
    task,
    task_backends,
)
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.utils import timezone
from shop import tasks
from shop.receivers import VARIABLE
from sqlalchemy.pool import NullPool

import jobq
from jobq.contrib.django.settings import database_url
from jobq.dialects.schema import tasks as jobq_tasks

BACKEND = "jobq.contrib.django.backend.JobqBackend"


def store() -> jobq.Store:
    return default_task_backend.app.store


def fresh(result: TaskResult) -> TaskResult:
    return default_task_backend.get_result(result.id)


@pytest.fixture
def signals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file shop.receivers writes each task signal to, here and in worker processes."""
    path = tmp_path / "signals.jsonl"
    monkeypatch.setenv(VARIABLE, str(path))
    return path


def recorded(path: Path) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The signals written down, by (signal, task result id)."""
    seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        seen.setdefault((entry["signal"], entry["id"]), []).append(entry)
    return seen


@pytest.mark.parametrize("name", ["noop", "noop_async"])
def test_enqueue_gives_a_ready_result_equal_to_the_one_read_back(name: str) -> None:
    the_task: Task = getattr(tasks, name)
    before = timezone.now()
    result = the_task.enqueue(1, ("a", 2), two=3)
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.task == the_task and result.backend == "default"
    assert result.args == [1, ["a", 2]] and result.kwargs == {"two": 3}  # JSON, as Django
    assert result.started_at is None and result.finished_at is None
    assert result.last_attempted_at is None
    assert result.errors == [] and result.worker_ids == [] and result.attempts == 0
    assert before - timedelta(seconds=5) < result.enqueued_at < timezone.now() + timedelta(5)
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    # enqueued_at is the row's own (the database's clock): the result reads back equal.
    assert the_task.get_result(result.id) == result
    assert async_to_sync(the_task.aget_result)(result.id) == result
    as_enqueued = dataclasses.asdict(result)
    result.refresh()
    async_to_sync(result.arefresh)()
    assert dataclasses.asdict(result) == as_enqueued


def test_aenqueue_of_sync_and_async_tasks() -> None:
    for the_task in (tasks.noop, tasks.noop_async):
        result = async_to_sync(the_task.aenqueue)(7)
        assert result.status == TaskResultStatus.READY and result.args == [7]
        assert result.task == the_task and fresh(result) == result


def test_results_of_other_tasks_and_ids_of_nothing() -> None:
    result = tasks.noop.enqueue()
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.noop_async.get_result(result.id)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        async_to_sync(tasks.noop_async.aget_result)(result.id)
    for missing in ("123456789", "abc", "", "0", "1.5", str(2**63)):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.noop.get_result(missing)
        with pytest.raises(TaskResultDoesNotExist):
            async_to_sync(default_task_backend.aget_result)(missing)


def test_a_burst_worker_runs_the_contract(run_worker, signals: Path) -> None:
    plain = jobq.App()
    plain.store = store()
    not_django = plain.store.enqueue("subprocess.check_output", {"args": [["true"]]})
    results = {
        "noop": tasks.noop.enqueue(1, two=3),
        "noop_async": tasks.noop_async.enqueue(),
        "add": tasks.add.enqueue(40, 2),
        "value_error": tasks.failing_value_error.enqueue(),
        "system_exit": tasks.failing_system_exit.enqueue(),
        "complex_exception": tasks.complex_exception.enqueue(),
        "complex_return_value": tasks.complex_return_value.enqueue(),
        "observe": tasks.observe.enqueue(),
        "observe_async": tasks.observe_async.enqueue(x=5),
        "later": tasks.noop.using(run_after=timezone.now() + timedelta(hours=10)).enqueue(),
    }

    run_worker()  # ONE worker process, until nothing is due: it survives SystemExit

    ran = {name: fresh(result) for name, result in results.items() if name != "later"}
    assert results["add"].status == TaskResultStatus.READY  # a result is read on refresh
    results["add"].refresh()
    assert results["add"] == ran["add"] and results["add"].return_value == 42
    async_to_sync(results["noop"].arefresh)()
    assert results["noop"] == ran["noop"]
    for name, done in ran.items():
        assert done.is_finished, name
        assert done.enqueued_at <= done.started_at <= done.finished_at, name
        assert done.last_attempted_at == done.started_at, name
        # One attempt each (RETRIES 0: one run, as Django expects). jobq keeps no worker id
        # of an ended attempt: one empty entry per attempt, so that attempts counts them.
        assert done.attempts == 1 and done.worker_ids == [""], name
    for name in ("noop", "noop_async", "add", "observe", "observe_async"):
        assert ran[name].status == TaskResultStatus.SUCCESSFUL and ran[name].errors == []
    assert ran["noop"].return_value is None and ran["noop"].args == [1]
    assert ran["noop"].kwargs == {"two": 3}

    # While it ran, the task's result said RUNNING, with the worker running it.
    observed = ran["observe"].return_value
    assert observed["status"] == observed["context_status"] == TaskResultStatus.RUNNING
    assert observed["attempt"] == 1 and observed["id"] == results["observe"].id
    (worker_id,) = observed["worker_ids"]
    assert worker_id and datetime.fromisoformat(observed["started"]) == ran["observe"].started_at
    assert ran["observe_async"].return_value == {
        "attempt": 1, "id": results["observe_async"].id, "x": 5
    }  # fmt: skip

    for name in ("value_error", "system_exit", "complex_exception", "complex_return_value"):
        assert ran[name].status == TaskResultStatus.FAILED, name
        with pytest.raises(ValueError, match="Task failed"):
            ran[name].return_value  # noqa: B018
    (error,) = ran["value_error"].errors
    assert error.exception_class is ValueError
    assert error.traceback.endswith("ValueError: This task failed due to ValueError\n")
    assert "in failing_value_error\n" in error.traceback  # the whole traceback
    (error,) = ran["complex_exception"].errors
    assert error.exception_class is ValueError
    assert 'ValueError(ValueError("This task failed"))' in error.traceback
    (error,) = ran["complex_return_value"].errors
    assert error.exception_class is TypeError and "Unsupported type" in error.traceback
    # A SystemExit fails its task, not the worker; jobq keeps its last line only.
    (error,) = ran["system_exit"].errors
    assert error.exception_class is SystemExit
    assert error.traceback == "SystemExit: This task failed due to SystemExit"

    later = fresh(results["later"])
    assert later.status == TaskResultStatus.READY and later.started_at is None
    assert later.attempts == 0 and dataclasses.replace(results["later"], task=later.task) == later
    # A row that is no Django task (a name no settings list) fails unrun, unimported.
    row = plain.store.get(not_django)
    assert row is not None and row.status == "failed" and "subprocess" in (row.error or "")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(not_django))

    seen = recorded(signals)
    for result in results.values():
        (enqueued,) = seen[("enqueued", result.id)]
        assert enqueued["status"] == TaskResultStatus.READY and enqueued["sender"] == BACKEND
    assert ("started", results["later"].id) not in seen
    for name, done in ran.items():
        (started,) = seen[("started", done.id)]
        (finished,) = seen[("finished", done.id)]
        assert started["sender"] == finished["sender"] == BACKEND, name
        assert started["status"] == TaskResultStatus.RUNNING, name
        assert datetime.fromisoformat(started["started_at"]) == done.started_at, name
        assert started["worker_ids"][-1] and started["finished_at"] is None, name
        assert finished["status"] == done.status, name
        assert [e.exception_class_path for e in done.errors] == finished["errors"], name
        assert datetime.fromisoformat(finished["finished_at"]) >= done.started_at, name
    assert seen[("finished", ran["add"].id)][0]["return_value"] == 42


def test_invalid_tasks_and_arguments_are_refused_before_anything_is_written() -> None:
    before = store().counts()
    for bad in (datetime.now(), object(), {1, 2}):
        with pytest.raises(TypeError, match="Unsupported type"):
            tasks.noop.enqueue(bad)
        with pytest.raises(TypeError, match="Unsupported type"):
            async_to_sync(tasks.noop.aenqueue)(value=bad)
    with pytest.raises(InvalidTask, match=r"Queue .nowhere. is not valid for backend\."):
        tasks.noop.using(queue_name="nowhere")
    elsewhere = tasks.noop.using(backend="immediate", queue_name="nowhere")  # QUEUES: []
    with pytest.raises(InvalidTask, match=r"Queue .nowhere. is not valid for backend\."):
        default_task_backend.enqueue(elsewhere, [], {})
    for priority in (-101, 101, 3.1):
        with pytest.raises(InvalidTask, match="priority must be a whole number"):
            tasks.noop.using(priority=priority)
    with pytest.raises(InvalidTask, match=r"run_after must be an aware datetime\."):
        tasks.noop.using(run_after=datetime.now())
    with pytest.raises(InvalidTask, match="does not have a first argument of 'context'"):
        task(takes_context=True)(tasks.add.func)
    with pytest.raises(TypeError, match="run_after cannot be defined statically"):
        task(run_after=timezone.now())(tasks.add.func)

    def nested() -> None: ...

    for function in (nested, any):
        with pytest.raises(InvalidTask, match="Task function must be defined at a module level"):
            task(function)
    with pytest.raises(InvalidTaskBackend, match=r"The connection .unknown. doesn.t exist\."):
        tasks.noop.using(backend="unknown")
    assert store().counts() == before


def test_using_makes_a_new_task_whose_options_the_row_and_result_keep() -> None:
    again = tasks.noop.using()
    assert again == tasks.noop and again is not tasks.noop
    moved = tasks.noop.using(priority=-100, queue_name="emails").using(priority=100)
    assert (moved.priority, moved.queue_name, tasks.noop.priority) == (100, "emails", 0)
    result = moved.enqueue()
    row = store().get(int(result.id))
    assert row is not None and (row.priority, row.queue_id) == (100, "emails")
    assert fresh(result).task == moved == result.task
    # The read-back task of a deferred run has no run_after: the row keeps when it runs
    # next (retries move it), not what was asked for.
    when = timezone.now() + timedelta(days=1)
    deferred = tasks.noop.using(run_after=when).enqueue()
    assert deferred.task.run_after == when and fresh(deferred).task.run_after is None
    assert store().get(int(deferred.id)).run_at == when
    # using(backend=...) enqueues through that backend: Django's ImmediateBackend runs it.
    immediate = tasks.add.using(backend="immediate").enqueue(1, 2)
    assert immediate.backend == "immediate" and immediate.return_value == 3


def test_an_enqueue_is_seen_by_other_connections_once_committed() -> None:
    other = sa.create_engine(database_url("default"), poolclass=NullPool)

    def seen(result: TaskResult) -> int:
        with other.connect() as conn:  # a plain read: no write lock taken, even on SQLite
            return len(conn.execute(sa.select(jobq_tasks.c.id).where(
                jobq_tasks.c.id == int(result.id))).all())  # fmt: skip

    with transaction.atomic():
        result = tasks.noop.enqueue()
        assert seen(result) == 0
        if connection.vendor == "postgresql":
            # get_result reads committed rows through jobq's own connection, as a worker
            # does. (On SQLite that read would wait for this block's write lock.)
            with pytest.raises(TaskResultDoesNotExist):
                fresh(result)
    assert seen(result) == 1 and fresh(result) == result
    other.dispose()


def test_results_and_tasks_pickle() -> None:
    result = tasks.add.enqueue(1, 2)
    assert pickle.loads(pickle.dumps(result)) == result
    assert pickle.loads(pickle.dumps(tasks.add)) == tasks.add


def test_the_enqueue_is_logged_by_djangos_receiver(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        result = tasks.noop.enqueue()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "django.tasks"]
    assert "enqueued" in line and result.id in line and "backend=default" in line


def test_system_checks(settings: Any) -> None:
    assert default_task_backend.check() == []
    assert [m for m in checks.run_checks() if m.id and m.id.startswith("jobq")] == []
    settings.INSTALLED_APPS = [a for a in settings.INSTALLED_APPS if a != "jobq.contrib.django"]
    (error,) = task_backends["default"].check()
    assert error.id == "jobq.E001" and "INSTALLED_APPS" in error.hint
    assert error.level == checks.ERROR
