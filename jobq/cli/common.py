"""What every jobq command shares: the database option and one-line error reporting."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from jobq.app.store import Store
from jobq.db.errors import JobqError
from jobq.db.patience import Deadline, patiently

_F = TypeVar("_F", bound=Callable[..., Any])

database_url_option = click.option(
    "--database-url",
    envvar="JOBQ_DATABASE_URL",
    default="sqlite:///jobq.db",
    show_default=True,
    help="Database URL (env: JOBQ_DATABASE_URL).",
)


def app_option(*, required: bool, help: str) -> Callable[[_F], _F]:
    """The --app option (module:attribute) of every command that loads an app, read from
    $JOBQ_APP when not given; ``help`` says what the command does with it."""
    return click.option(
        "--app", "app_path", envvar="JOBQ_APP", required=required, default=None,
        help=f"{help} (module:attribute; env: JOBQ_APP)",
    )  # fmt: skip


# The ranges the tables store (ids are 64-bit, priority and retries 32-bit columns).
TASK_ID = click.IntRange(1, 2**63 - 1)
PRIORITY = click.IntRange(-(2**31), 2**31 - 1)
RETRIES = click.IntRange(0, 2**31 - 1)
#: Seconds a reading command waits for a database that cannot be reached (a restart, a
#: session the server ended) before it fails: a fast restart takes well under one.
READ_PATIENCE = 5.0


@contextmanager
def clear_errors() -> Iterator[None]:
    """Expected problems end the command with one clear line and exit status 1."""
    try:
        yield
    except JobqError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(1)


@contextmanager
def store_for(
    database_url: str, *, read_only: bool = False, serves: bool = False
) -> Iterator[Store]:
    """A Store for ``database_url``, its problems reported by clear_errors, then disposed.

    ``read_only`` is for commands that only read: a database that does not exist (a SQLite
    file, which connecting would create empty) is then an error, and nothing is created;
    and the command waits out an outage (a restart, its sessions ended) for up to
    READ_PATIENCE seconds before it says the database cannot be reached, unless it
    ``serves`` requests until stopped (each then has patience of its own, if any).
    """
    with clear_errors():
        store = Store(database_url)
        try:
            if read_only:
                store.db.require_existing()  # before anything connects
            if read_only and not serves:
                with patiently(Deadline(READ_PATIENCE)):
                    yield store
            else:
                yield store
        finally:
            store.dispose()
