"""``manage.py jobq_migrate [--database ALIAS]``: make or upgrade jobq's tables, which is
``manage.py migrate jobq`` (jobq's tables come with jobq.contrib.django's migrations)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS


class Command(BaseCommand):
    help = "Make or upgrade jobq's tables: `migrate jobq` (jobq.contrib.django's migrations)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--database", default=DEFAULT_DB_ALIAS, help="The database to migrate (an alias)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        call_command(
            "migrate", "jobq", database=options["database"], verbosity=options["verbosity"],
            stdout=self.stdout, stderr=self.stderr,
        )  # fmt: skip
