"""jobq's tables in a Django project: made and upgraded by ``manage.py migrate``.

Each migration of jobq.contrib.django upgrades jobq's schema (jobq's own Alembic
revisions, on a connection of jobq's) to one revision, in every jobq database that the
database being migrated stands for: that of each JobqBackend whose OPTIONS name its alias,
and, with the ``default`` alias, of those with a DATABASE_URL of their own. A jobq release
that adds a revision adds the migration that applies it.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from jobq.contrib.django.settings import DjangoApp, app_for
from jobq.engine import migrations


def jobq_apps(alias: str) -> list[DjangoApp]:
    """The Apps of the JobqBackends of TASKS whose jobq tables live in Django's ``alias``."""
    from jobq.contrib.django.backend import JobqBackend

    found: list[DjangoApp] = []
    for params in getattr(settings, "TASKS", {}).values():
        if not issubclass(import_string(params["BACKEND"]), JobqBackend):
            continue
        options = params.get("OPTIONS", {})
        if options.get("DATABASE_URL"):
            mine = alias == "default"
        else:
            mine = options.get("DATABASE", "default") == alias
        app = app_for(options)
        if mine and app not in found:
            found.append(app)
    return found


def upgrade(alias: str, revision: str) -> None:
    """Upgrade the jobq tables of Django's ``alias`` to ``revision``."""
    for app in jobq_apps(alias):
        migrations.upgrade_database(app.store.db, revision)


def downgrade(alias: str, revision: str) -> None:
    """Downgrade the jobq tables of Django's ``alias`` to ``revision`` ("base": none left)."""
    for app in jobq_apps(alias):
        with app.store.db.engine.begin() as conn:
            migrations.downgrade(conn, revision)


def forward(revision: str) -> Any:
    """A RunPython function upgrading to ``revision`` the database being migrated."""

    def run(_apps: Any, schema_editor: Any) -> None:
        upgrade(schema_editor.connection.alias, revision)

    return run


def backward(revision: str) -> Any:
    """A RunPython function downgrading to ``revision`` the database being unmigrated."""

    def run(_apps: Any, schema_editor: Any) -> None:
        downgrade(schema_editor.connection.alias, revision)

    return run
