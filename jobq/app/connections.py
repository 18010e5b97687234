"""What a caller may pass as ``_connection=`` (``connection=``) to enqueue in its own
transaction: a SQLAlchemy Connection, or an object an adapter registered here turns into one.

jobq.contrib.django registers the adapter of Django's database connections when its
AppConfig is ready; anything no adapter takes is refused with InvalidOption saying what to
pass instead. jobq.app never imports a framework: it tells a Django object by the module
its type comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection

from jobq.db.errors import InvalidOption

if TYPE_CHECKING:
    from jobq.app.store import Store

#: An adapter: given what the caller passed and the Store that will write, a context
#: manager giving a SQLAlchemy Connection in the caller's transaction, or None when the
#: object is not one it knows.
Adapter = Callable[[object, "Store"], AbstractContextManager[Connection] | None]

_ADAPTERS: list[Adapter] = []

_WHAT_TO_PASS = (
    "pass a SQLAlchemy Connection (engine.connect(), session.connection()), or with "
    "Django, django.db.connection (or connections[alias]) with 'jobq.contrib.django' in "
    "INSTALLED_APPS"
)


def register_adapter(adapter: Adapter) -> None:
    """Let ``adapter`` turn objects it knows into SQLAlchemy Connections (once each)."""
    if adapter not in _ADAPTERS:
        _ADAPTERS.append(adapter)


def adapted(given: object, store: Store) -> AbstractContextManager[Connection | None]:
    """``given`` as a SQLAlchemy Connection in its own transaction, for ``store`` to write
    in: None and Connections pass through unchanged (no generator on every enqueue's way);
    other objects go to the registered adapters. InvalidOption when none takes it."""
    if given is None or isinstance(given, Connection):
        return nullcontext(given)
    for adapter in _ADAPTERS:
        manager = adapter(given, store)
        if manager is not None:
            return manager
    raise InvalidOption(option="_connection", reason=_refusal(given))


def _refusal(given: object) -> str:
    kind = type(given)
    what = f"{kind.__module__}.{kind.__qualname__}"
    if kind.__module__.split(".")[0] == "django":
        why = "is Django's, and 'jobq.contrib.django' is not in INSTALLED_APPS"
    else:
        why = "is not a connection jobq can write in"
    return f"a {what} {why}; {_WHAT_TO_PASS}"


def refuse_unless_sqlalchemy(given: object) -> None:
    """InvalidOption unless ``given`` is None or a SQLAlchemy Connection: for callers that
    run the write in another thread, where a framework's connection is not the caller's."""
    if given is not None and not isinstance(given, Connection):
        raise InvalidOption(
            option="_connection",
            reason=f"enqueue_async writes in another thread and takes a SQLAlchemy "
            f"Connection only, not a {type(given).__module__}.{type(given).__qualname__}; "
            "with Django, call enqueue() (sync_to_async(task.enqueue) in async code)",
        )
