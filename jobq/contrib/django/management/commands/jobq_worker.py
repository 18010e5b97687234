"""``manage.py jobq_worker [--backend ALIAS] [options of jobq worker]``: `jobq worker` run on
the App of a TASKS backend (jobq.contrib.django.worker), with every option of `jobq worker`
(``manage.py jobq_worker --help`` lists them)."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from jobq.cli.run_worker import worker

# Not jobq.contrib.django.worker: importing it picks the backend, before --backend is read.
from jobq.contrib.django.backend import BACKEND_VARIABLE

#: What `jobq worker --app` loads: Django set up, the tasks modules imported.
APP_PATH = "jobq.contrib.django.worker:app"
# Django's own options, read by manage.py before it runs the command.
_DJANGO_OPTIONS = {"--settings", "--pythonpath"}


class Command(BaseCommand):
    help = "Run jobq's worker on the tasks of a TASKS backend (options: those of `jobq worker`)."

    def run_from_argv(self, argv: list[str]) -> None:
        """Hand the arguments to `jobq worker`'s own command line, with the App preset."""
        args = _without_django_options(argv[2:])
        try:
            backend = _take_backend(args)
        except CommandError as error:  # as BaseCommand.run_from_argv shows one
            self.stderr.write(f"CommandError: {error}")
            sys.exit(error.returncode)
        if backend is not None:
            os.environ[BACKEND_VARIABLE] = backend  # the worker's processes see it too
        worker.main(
            ["--app", APP_PATH, *args], prog_name=f"{os.path.basename(argv[0])} jobq_worker"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        raise NotImplementedError("run it as `manage.py jobq_worker`, not through call_command")


def _without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in _DJANGO_OPTIONS:
            skip = True
        elif arg.split("=", 1)[0] not in _DJANGO_OPTIONS:
            kept.append(arg)
    return kept


def _take_backend(args: list[str]) -> str | None:
    """The value of ``--backend ALIAS`` (or ``--backend=ALIAS``), taken out of ``args``;
    None when it is not given. CommandError when it has no value."""
    for at, arg in enumerate(args):
        if arg == "--backend":
            if at + 1 >= len(args) or args[at + 1].startswith("-"):
                raise CommandError("--backend needs the alias of a TASKS backend")
            value = args[at + 1]
            del args[at : at + 2]
            return value
        if arg.startswith("--backend="):
            del args[at]
            return arg.partition("=")[2]
    return None
