"""Helpers shared by the test suites."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks

_T = TypeVar("_T")


def until(condition: Callable[[], _T | None], timeout: float = 15.0, every: float = 0.05) -> _T:
    """The first true value of ``condition()``, polled every ``every`` s until ``timeout``
    seconds pass (then the test fails)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(every)
    return value


def all_rows(store: jobq.Store) -> list[dict[str, Any]]:
    """Every task row as a dict, ordered by id: for 'nothing changed' assertions."""
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(sa.select(tasks).order_by(tasks.c.id))]


def expire_lease(store: jobq.Store, task_id: int) -> None:
    """Move a running task's lease into the past, as if its worker had stopped renewing it."""
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(tasks)
            .where(tasks.c.id == task_id)
            .values(locked_until=store.dialect.now_plus(-60.0))
        )


def set_columns(store: jobq.Store, task_id: int, **values: Any) -> None:
    """Write columns of one row directly, to build states the API reaches only slowly."""
    with store.engine.begin() as conn:
        conn.execute(sa.update(tasks).where(tasks.c.id == task_id).values(**values))


def hears_its_enqueues(store: jobq.Store) -> bool:
    """Whether ``store`` listens (its LISTEN connection, wherever its listen URL points)
    and hears the enqueues it makes to queue ``wake``."""
    heard = threading.Event()
    stop = threading.Event()
    try:
        if not store.listen(lambda queues: queues and "wake" in queues and heard.set(), stop):
            return False
        # The first notification (None) says the LISTEN is in place; enqueue until heard.
        for _ in range(100):
            store.enqueue("t", {}, queue="wake")
            if heard.wait(0.2):
                return True
        return False
    finally:
        stop.set()
