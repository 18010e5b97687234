"""A Django project using jobq.contrib.django, for the tests of tests/django.

Its database is $JOBQ_DJANGO_DATABASE: sqlite (a file), postgresql (the server of
$JOBQ_TEST_POSTGRES_URL) or mysql (MariaDB or MySQL, the server of $JOBQ_TEST_MYSQL_URL, through
Django's mysqlclient). $JOBQ_DJANGO_NAME names the database (the file, on SQLite); the
test runner's is ``test_`` + that name, which the tests hand to the worker processes they
start as $JOBQ_DJANGO_NAME.
"""

import os
import tempfile
from pathlib import Path

import sqlalchemy as sa

KIND = os.environ.get("JOBQ_DJANGO_DATABASE", "sqlite")
NAME = os.environ.get("JOBQ_DJANGO_NAME", "jobq_django")

SECRET_KEY = "only for tests"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "djproject.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "jobq.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

if KIND == "sqlite":
    path = NAME if os.path.isabs(NAME) else str(Path(tempfile.gettempdir()) / f"{NAME}.sqlite3")
    test_path = str(Path(path).with_name(f"test_{Path(path).name}"))
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            # Workers write at the same time: WAL (readers never wait for the writer), the
            # write lock taken at BEGIN, and waited for.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
            "TEST": {"NAME": test_path},
        }
    }
elif KIND == "postgresql":
    server = sa.make_url(os.environ["JOBQ_TEST_POSTGRES_URL"])
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": NAME,
            "USER": server.username or "",
            "PASSWORD": server.password or "",
            "HOST": server.host or "",
            "PORT": str(server.port or ""),
            "TEST": {"NAME": f"test_{NAME}"},
        }
    }
elif KIND == "mysql":
    server = sa.make_url(os.environ["JOBQ_TEST_MYSQL_URL"])
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",  # mysqlclient (MySQLdb)
            "NAME": NAME,
            "USER": server.username or "",
            "PASSWORD": server.password or "",
            "HOST": server.host or "",
            "PORT": str(server.port or ""),
            "OPTIONS": {"charset": "utf8mb4"},
            "TEST": {"NAME": f"test_{NAME}", "CHARSET": "utf8mb4"},
        }
    }
else:
    raise RuntimeError(f"JOBQ_DJANGO_DATABASE={KIND!r}: expected sqlite, postgresql or mysql")

TASKS = {
    "default": {
        "BACKEND": "jobq.contrib.django.JobqBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"TASK_OPTIONS": {"shop.tasks.flaky": {"retries": 1, "backoff": 0}}},
    },
    # Django's own backend, for the tests of Task.using(backend=...).
    "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": []},
}
