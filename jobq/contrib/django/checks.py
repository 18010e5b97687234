"""Django's system checks of a JobqBackend (``manage.py check`` runs them through
``BaseTaskBackend.check``): what would otherwise fail only at the first enqueue or run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error

#: The application whose migrations make jobq's tables and whose readiness lets jobq take
#: Django's connections as ``_connection=``.
APP = "jobq.contrib.django"


def checks_of(alias: str, options: Mapping[str, Any]) -> list[CheckMessage]:
    """The check messages of the TASKS backend ``alias`` with ``options``."""
    found: list[CheckMessage] = []
    if not apps.is_installed(APP):
        found.append(
            Error(
                f"TASKS[{alias!r}] is a JobqBackend, but {APP!r} is not in INSTALLED_APPS.",
                hint=f"INSTALLED_APPS += [{APP!r}]: its migrations make jobq's tables "
                "(manage.py migrate) and its commands run the worker.",
                obj=f"TASKS[{alias!r}]",
                id="jobq.E001",
            )
        )
    return found
