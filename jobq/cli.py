"""The `jobq` command line; each command is thin and calls one function of the library."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from jobq.errors import JobqError
from jobq.store import Store

database_url_option = click.option(
    "--database-url",
    envvar="JOBQ_DATABASE_URL",
    default="sqlite:///jobq.db",
    show_default=True,
    help="Database URL (env: JOBQ_DATABASE_URL).",
)


@contextmanager
def _clear_errors() -> Iterator[None]:
    """Expected problems end the command with one clear line and exit status 1."""
    try:
        yield
    except JobqError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


@click.group()
@click.version_option(package_name="jobq")
def main() -> None:
    """jobq: a job queue whose whole state lives in SQL rows."""


@main.command()
@database_url_option
def migrate(database_url: str) -> None:
    """Create or upgrade jobq's tables (Alembic upgrade head)."""
    with _clear_errors():
        store = Store(database_url)
        store.migrate()
        click.echo(f"migrated {store!r} to the newest revision")


if __name__ == "__main__":
    main()
