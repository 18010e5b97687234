"""`jobq locks`: list, release and purge the locks of jobq.locks and tasks' lock keys."""

from __future__ import annotations

import click

from jobq import locks as jobq_locks
from jobq.cli.common import database_url_option, store_for
from jobq.cli.output import table, when
from jobq.cli.params import Key
from jobq.db.errors import JobqError


@click.group()
def locks() -> None:
    """Mutexes, timeout locks, leases, and the lock keys of running tasks."""


@locks.command("list")
@database_url_option
def list_(database_url: str) -> None:
    """Every lock: kind, name, holder, since, expires.

    Free mutexes are left out; a timeout lock's "expires" is when the period its last
    holder asked for ends; "task" rows are running tasks' lock keys.
    """
    with store_for(database_url, read_only=True) as store:
        found = jobq_locks.list_locks(store)
    if not found:
        click.echo("no locks")
        return
    rows = [[h.kind, h.name, h.holder or "-", when(h.since), when(h.expires)] for h in found]
    click.echo(table(["kind", "name", "holder", "since", "expires"], rows))


@locks.command()
@click.argument("name", type=Key())
@database_url_option
def release(name: str, database_url: str) -> None:
    """Free lock NAME by hand, whoever holds it.

    A mutex is released, a lease given up, a timeout lock's period ended. A running
    task's lock key is freed when its run ends, not here.
    """
    with store_for(database_url) as store:
        if not jobq_locks.release(store, name):
            if any(key == name for key, *_ in store.running_lock_keys()):
                raise JobqError(
                    f"{name!r} is the lock key of a running task; it is freed when the run ends"
                )
            raise JobqError(f"no held lock named {name!r}")
    click.echo(f"released {name!r}")


@locks.command()
@database_url_option
def purge(database_url: str) -> None:
    """Delete the rows of expired leases (workers also do this every few seconds)."""
    with store_for(database_url) as store:
        purged = jobq_locks.purge(store)
    click.echo(f"purged {purged} expired lease{'' if purged == 1 else 's'}")
