"""The Django application ``jobq.contrib.django``: its migrations make jobq's tables, its
commands run the worker, and once it is ready Django's connections are accepted as
``_connection=`` of any jobq enqueue."""

from __future__ import annotations

from django.apps import AppConfig

from jobq.app.connections import register_adapter
from jobq.contrib.django import connection


class JobqConfig(AppConfig):
    """``INSTALLED_APPS += ["jobq.contrib.django"]``."""

    name = "jobq.contrib.django"
    label = "jobq"
    verbose_name = "jobq"

    def ready(self) -> None:
        register_adapter(connection.adapt)
