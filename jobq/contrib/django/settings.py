"""Where jobq's rows live in a Django project: the App of each jobq database, its URL built
from Django's ``DATABASES`` (the same server and credentials, written once).

OPTIONS of a ``TASKS`` entry: ``DATABASE`` names the alias (default ``"default"``);
``DATABASE_URL`` points jobq elsewhere instead (its enqueues then cannot share Django's
transactions). The URL is a ``sqlalchemy.URL`` read from ``connections[alias].settings_dict``
each time the App's Store is needed, so a test database (``test_<NAME>``, made by Django's
test runner or pytest-django after the settings were read) is the one jobq uses too.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from jobq.app import App
from jobq.app.store import Store

#: Django's database engines jobq runs on, and the SQLAlchemy driver of each.
DRIVERS = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.sqlite3": "sqlite+pysqlite",
    "django.db.backends.mysql": "mysql+pymysql",
}
#: Options of Django's PostgreSQL OPTIONS that are libpq's and so the URL's too.
_LIBPQ = {
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "options",
    "application_name", "connect_timeout", "service", "passfile", "target_session_attrs",
}  # fmt: skip
_MYSQL = {"charset", "ssl", "ssl_ca", "ssl_cert", "ssl_key", "unix_socket"}


def engine_of(alias: str) -> str:
    """The ENGINE of Django's database ``alias``; ImproperlyConfigured if jobq cannot use it."""
    if alias not in connections.settings:
        raise ImproperlyConfigured(f"jobq: DATABASES has no {alias!r} (OPTIONS DATABASE)")
    engine: str = connections.settings[alias]["ENGINE"]
    if engine not in DRIVERS:
        raise ImproperlyConfigured(
            f"jobq: DATABASES[{alias!r}] uses {engine}; jobq runs on "
            f"{', '.join(sorted(DRIVERS))} (or give OPTIONS DATABASE_URL)"
        )
    return engine


def database_url(alias: str) -> sa.URL:
    """The SQLAlchemy URL of Django's database ``alias`` as its connections see it now."""
    engine = engine_of(alias)
    settings: Mapping[str, Any] = connections[alias].settings_dict
    options: Mapping[str, Any] = settings.get("OPTIONS") or {}
    if engine == "django.db.backends.sqlite3":
        name = str(settings["NAME"])
        if name == ":memory:" or name.startswith("file::memory:") or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"jobq: DATABASES[{alias!r}] is an in-memory SQLite database, which no worker "
                "process can see; give it a file (and TEST NAME a file in tests)"
            )
        return sa.URL.create(DRIVERS[engine], database=str(Path(name).resolve()))
    wanted = _LIBPQ if engine == "django.db.backends.postgresql" else _MYSQL
    query = {key: str(value) for key, value in options.items() if key in wanted}
    return sa.URL.create(
        DRIVERS[engine],
        username=settings.get("USER") or None,
        password=settings.get("PASSWORD") or None,
        host=settings.get("HOST") or None,
        port=int(settings["PORT"]) if settings.get("PORT") else None,
        database=settings.get("NAME") or None,
        query=query,
    )


class DjangoApp(App):
    """A jobq App whose database is Django's ``alias`` (or ``url``, given): its Store is
    made again when the database Django points the alias at changes (a test database)."""

    def __init__(self, alias: str, url: str | None = None) -> None:
        super().__init__(url)
        #: The Django database alias jobq's rows are in; None with a DATABASE_URL of its own.
        self.alias = None if url else alias
        self._url: sa.URL | str | None = None
        self._set = False
        self._lock = threading.Lock()

    @property
    def store(self) -> Store:
        """The Store of the database the alias points at now (or of the URL given)."""
        with self._lock:
            if self._set and self._store is not None:
                return self._store
            url = self._database_url if self.alias is None else database_url(self.alias)
            if self._store is None or url != self._url:
                if self._store is not None:
                    self._store.dispose()
                self._store, self._url = Store(url), url
            return self._store

    @store.setter
    def store(self, store: Store) -> None:
        """Use ``store`` from now on (`jobq worker --database-url`), whatever Django says."""
        self._store, self._set = store, True

    @property
    def shares_transactions(self) -> bool:
        """Whether enqueues go through Django's own connection (not a DATABASE_URL)."""
        return self.alias is not None


_APPS: dict[tuple[str, str | None], DjangoApp] = {}
_APPS_LOCK = threading.Lock()


def app_for(options: Mapping[str, Any]) -> DjangoApp:
    """The one DjangoApp of the database a backend's OPTIONS name (every backend and thread
    naming it shares it, with its tasks and Store)."""
    alias = str(options.get("DATABASE", "default"))
    url = options.get("DATABASE_URL")
    key = (alias, None if url is None else str(url))
    with _APPS_LOCK:
        app = _APPS.get(key)
        if app is None:
            if url is None:
                engine_of(alias)  # a clear error now, not at the first enqueue
            app = _APPS[key] = DjangoApp(alias, None if url is None else str(url))
        return app
