"""JobqBackend: Django's Tasks framework on jobq's rows.

``TASKS = {"default": {"BACKEND": "jobq.contrib.django.JobqBackend", "OPTIONS": {...}}}``.
A ``@task`` is registered in the backend's jobq App when Django validates it (as it is
defined); ``enqueue()`` writes its row through Django's own connection of jobq's database,
so inside ``transaction.atomic()`` the task exists only if the block commits; ``jobq worker``
(or ``manage.py jobq_worker``) runs it; ``get_result()`` reads it back as a TaskResult.

Priorities are Django's (-100..100) as they are: jobq, too, runs higher priorities first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.tasks import Task, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from jobq.app.connections import register_adapter
from jobq.contrib.django import connection
from jobq.contrib.django.checks import checks_of
from jobq.contrib.django.results import local_time, result_of
from jobq.contrib.django.running import django_task, register
from jobq.contrib.django.settings import DjangoApp, app_for

#: The environment variable naming the TASKS backend whose App `jobq worker --app
#: jobq.contrib.django.worker:app` runs (``manage.py jobq_worker --backend`` sets it).
BACKEND_VARIABLE = "JOBQ_DJANGO_BACKEND"


class JobqBackend(BaseTaskBackend):
    """A Django task backend whose tasks are jobq tasks, in jobq's tables of Django's
    database (OPTIONS ``DATABASE``: the alias, default ``"default"``; or ``DATABASE_URL``).

    OPTIONS also take jobq's options for every task (``RETRIES``, default 0 as Django
    expects one run; ``TIMEOUT`` seconds; ``LEASE`` seconds; ``BACKOFF`` seconds) and per
    task (``TASK_OPTIONS``: ``{"app.tasks.send": {"retries": 5}}``), and ``TASK_MODULES``,
    modules the worker imports besides each installed app's ``tasks``.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        register_adapter(connection.adapt)
        #: The jobq App this backend's tasks are registered in and enqueued through.
        self.app: DjangoApp = app_for(self.options)

    def validate_task(self, task: Task) -> None:
        """Django's checks, then the task registered in the jobq App (a worker runs it)."""
        super().validate_task(task)
        register(self.app, task, type(self), self.options)

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> TaskResult:
        """Write the task's row (in Django's transaction on jobq's database); its READY
        TaskResult, whose id is the jobq task's id."""
        self.validate_task(task)
        arguments = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # USE_TZ = False: local time
            run_at = timezone.make_aware(run_at)
        options = {"queue": task.queue_name, "priority": task.priority, "run_at": run_at}
        app = self.app
        if app.alias is None:  # a DATABASE_URL of its own: no transaction to share
            handle = app.enqueue(task.module_path, arguments, **options)
            row = app.store.get(int(handle))
            enqueued_at = timezone.now() if row is None else row.created_at  # None: deleted
        else:
            with connection.shared(connections[app.alias], app.store) as conn:
                handle = app.enqueue(task.module_path, arguments, connection=conn, **options)
                enqueued_at = connection.created_at(conn, int(handle))
        result = TaskResult(
            task=task, id=str(int(handle)), status=TaskResultStatus.READY,
            enqueued_at=local_time(enqueued_at), started_at=None, last_attempted_at=None,
            finished_at=None, args=arguments["args"], kwargs=arguments["kwargs"],
            backend=self.alias, errors=[], worker_ids=[],
        )  # fmt: skip
        task_enqueued.send(type(self), task_result=result)
        return result

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """Django's system checks of this backend (``manage.py check``): jobq.contrib.django
        installed (its migrations make jobq's tables), and a database jobq can share."""
        return checks_of(self.alias, self.options)

    def get_result(self, result_id: str) -> TaskResult:
        """The TaskResult of task ``result_id``, read from its jobq row;
        TaskResultDoesNotExist if there is none, or it is not one of this App's Django tasks
        (those of the modules imported, and of the modules the worker imports: discover())."""
        try:
            task_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        row = self.app.store.get(task_id) if 0 < task_id < 2**63 else None
        task = None if row is None else django_task(self.app, row.name)
        if row is not None and task is None:  # defined in a module not imported yet?
            discover()
            task = django_task(self.app, row.name)
        if row is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        return result_of(task, row, backend=self.alias)


def discover() -> None:
    """Import every installed app's ``tasks`` module and each backend's TASK_MODULES (names
    from the settings, never from a row): every task is then registered."""
    autodiscover_modules("tasks")
    for params in getattr(settings, "TASKS", {}).values():
        for module in params.get("OPTIONS", {}).get("TASK_MODULES", ()):
            import_module(module)


def backend_app(alias: str) -> DjangoApp:
    """The jobq App of the TASKS backend ``alias``; ImproperlyConfigured if it is no
    JobqBackend."""
    backend = task_backends[alias]
    if not isinstance(backend, JobqBackend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is a {type(backend).__name__}, not jobq.contrib.django.JobqBackend"
        )
    app: DjangoApp = backend.app
    return app
