"""Waking workers and waiters: the LISTEN / NOTIFY part of a dialect, and its defaults.

Dialect takes these functions as its methods of the same names (a database that cannot
notify keeps them: workers and waiters poll); PostgreSQL overrides them all
(postgresql.py, postgresql_listen.py). Each promise below is the one every dialect keeps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.engine import Connection, Engine

from jobq.db.outage import Outage


def wake_workers(dialect: object, conn: Connection, ids: Sequence[int]) -> None:
    """Tell listening workers, once ``conn`` commits, that the tasks ``ids`` were
    queued by an UPDATE (an INSERT tells them by itself); nothing where workers poll."""


def wake_for_limits(dialect: object, conn: Connection, queue: str) -> None:
    """Tell listening workers, once ``conn`` commits, that ``queue``'s limit or pause
    changed, so that they read the limits again now; nothing where workers poll."""


def listen(
    dialect: object,
    engine: Engine,
    on_enqueued: Callable[[set[str] | None], None],
    stop: Any,
    outage: Outage | None = None,
) -> bool:
    """Call ``on_enqueued(queues)`` whenever tasks are enqueued, until ``stop`` is set.

    ``queues`` names the queues that got tasks, or is None when unknown (after a
    reconnect, say). While the database cannot be reached, ``outage`` (else one of the
    listener's own) hears of it. Returns False where the database cannot notify:
    workers poll.
    """
    return False


def why_polling(dialect: object) -> str | None:
    """Why workers poll though this database could notify them (None: it cannot, or
    they are notified), in words for their log."""
    return None


def listen_for_ends(
    dialect: object,
    engine: Engine,
    on_ended: Callable[[int | None], None],
    stop: Any,
    outage: Outage | None = None,
) -> bool:
    """Call ``on_ended(id)`` whenever an awaited task ends, until ``stop`` is set.

    A task is awaited once its ``awaited`` column is true; it ends when it becomes
    terminal or is deleted. ``on_ended(None)`` says that notifications may have been
    missed (the first time: that listening has begun), so every waiter must look
    again. From a thread of its own, reconnecting by itself; ``outage`` (else one of
    its own) hears while it cannot connect. Returns False where the database cannot
    notify: waiters poll the rows.
    """
    return False
