"""A new row's fair key at enqueue (the hook fair_keys of jobq.core.hooks), asked in the
enqueue's own transaction where the queues' settings must be read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from jobq.core.hooks import Hooks
from jobq.db.patience import reading_for_a_write
from jobq.db.validation import check_key

_T = TypeVar("_T")


def fair_key_of(
    hooks: Hooks,
    params: dict[str, Any],
    queue: str,
    fair_key: str | None,
    connection: Connection | None,
) -> Callable[[Connection], None] | None:
    """Set the new row's ``new_fair_key`` in ``params`` (none if it has no key); where its
    queue is fair, what wakes its key in the enqueue's transaction. The hook may read the
    queues' settings on ``connection``."""
    check_key("fair_key", fair_key)
    hook = hooks.fair_keys
    if hook is None:
        if fair_key is not None:
            params["new_fair_key"] = fair_key
        return None
    key, fair = hook.key_of(queue, fair_key, connection)
    if key is not None:
        params["new_fair_key"] = key
    if not fair or key is None:
        return None
    return lambda conn: hook.enqueued(conn, queue, [key])


def with_fair_settings(
    hooks: Hooks, connection: Connection | None, write: Callable[[Connection | None], _T]
) -> _T:
    """``write(connection)``; without a ``connection``, the queues' settings are read first
    where the Store's copy is old, on a connection of their own: as a reader that waits out
    an outage until the enqueue's deadline, failing as an enqueue that wrote nothing."""
    hook = hooks.fair_keys
    if connection is None and hook is not None:
        with reading_for_a_write():
            hook.refresh()
    return write(connection)
