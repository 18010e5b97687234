"""What App and TaskFunction do to enqueue: the underscore options, the rows of
enqueue_many, and the signatures of ``task.s(...)``. Plain functions the App's methods
delegate to, so that application.py keeps its public API and its docstrings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from jobq.app.store import Store
from jobq.core.registry import TaskDefinition
from jobq.db.errors import InvalidTaskArguments, InvalidWorkflow
from jobq.db.payload import encode_args
from jobq.db.validation import check_key
from jobq.workflows.graph import Signature, SignatureApp

#: Enqueue options of TaskFunction.enqueue; the leading underscore keeps them apart from
#: the task's own arguments, which may not start with one.
ENQUEUE_OPTIONS = ("_delay", "_run_at", "_priority", "_queue", "_fair_key", "_connection")


def split_options(task: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the underscore options from ``kwargs`` and return them without the underscore."""
    options = {}
    for key in [k for k in kwargs if k.startswith("_")]:
        if key not in ENQUEUE_OPTIONS:
            raise InvalidTaskArguments(
                f"task {task!r}: unknown enqueue option {key!r}; "
                f"options are {', '.join(ENQUEUE_OPTIONS)}"
            )
        options[key[1:]] = kwargs.pop(key)
    return options


def given(**options: Any) -> dict[str, Any]:
    """The options not None: those the caller chose, which win over the definition's."""
    return {key: value for key, value in options.items() if value is not None}


def enqueue_rows(
    store: Store,
    definition: TaskDefinition,
    checked: Sequence[dict[str, Any]],
    connection: Connection | None,
    **chosen: Any,
) -> list[int]:
    """The rows of App.enqueue_many: ``checked`` arguments, with the definition's options
    but those ``chosen`` (queue, priority, fair_key: None for the definition's; run_at,
    delay), in ``connection``'s transaction if given; their ids, in order."""
    options: dict[str, Any] = dict(
        queue=definition.queue if chosen["queue"] is None else chosen["queue"],
        priority=definition.priority if chosen["priority"] is None else chosen["priority"],
        run_at=chosen["run_at"], delay=chosen["delay"], retries=definition.retries,
        timeout=definition.timeout, connection=connection,
    )  # fmt: skip
    fair_key = chosen.get("fair_key")
    if definition.unique is None and definition.lock is None:
        if fair_key is not None or definition.fair_key is None:
            return store.enqueue_many(definition.name, checked, fair_key=fair_key, **options)
        return _by_fair_key(store, definition, checked, connection, options)
    # Keys differ per entry (all formatted before any row is written); each row goes on
    # its own, in one transaction.
    keys = [(definition.unique_key(a), definition.lock_key(a)) for a in checked]

    def enqueue_each(conn: Connection) -> list[int]:
        return [
            store.enqueue(
                definition.name,
                arguments,
                unique_key=unique_key,
                lock_key=lock_key,
                fair_key=fair_key if fair_key is not None else definition.fair_key_of(arguments),
                **{**options, "connection": conn},
            )
            for arguments, (unique_key, lock_key) in zip(checked, keys, strict=True)
        ]

    with store.enqueuer.waiting(connection):  # one transaction: waits, tried again whole
        return store.db.write(enqueue_each, connection, atomic=True)


def _by_fair_key(
    store: Store,
    definition: TaskDefinition,
    checked: Sequence[dict[str, Any]],
    connection: Connection | None,
    options: dict[str, Any],
) -> list[int]:
    """enqueue_rows for a task whose fair_key template gives rows different keys: one bulk
    insert per key (all keys formatted before any row is written), in one transaction;
    the ids in the order of ``checked``."""
    groups: dict[str | None, list[int]] = {}
    for position, arguments in enumerate(checked):
        groups.setdefault(definition.fair_key_of(arguments), []).append(position)

    def enqueue_groups(conn: Connection) -> list[int]:
        ids = [0] * len(checked)
        for key, positions in groups.items():
            rows = [checked[position] for position in positions]
            written = store.enqueue_many(
                definition.name, rows, fair_key=key, **{**options, "connection": conn}
            )
            for position, task_id in zip(positions, written, strict=True):
                ids[position] = task_id
        return ids

    with store.enqueuer.waiting(connection):  # one transaction: waits, tried again whole
        return store.db.write(enqueue_groups, connection, atomic=True)


def signature(app: SignatureApp, definition: TaskDefinition, kwargs: dict[str, Any]) -> Signature:
    """``task.s(**kwargs)`` of the task ``definition`` of ``app``."""
    name = definition.name
    options = split_options(name, kwargs)
    if "connection" in options:
        raise InvalidTaskArguments(
            f"task {name!r}: a signature takes no _connection; give it to enqueue()"
        )
    arguments = definition.check_arguments(kwargs, json=False)
    args_text = encode_args(name, arguments)  # checked for JSON here, and kept
    if definition.unique is not None:
        raise InvalidWorkflow(
            reason=f"task {name!r} has unique={definition.unique!r}: a workflow node "
            "cannot be replaced by another pending task"
        )
    row = definition.row_options(arguments)
    fair_key = options.get("fair_key", row["fair_key"])
    check_key("fair_key", fair_key)
    return Signature(
        app=app,
        name=name,
        arguments=arguments,
        args_text=args_text,
        queue=options.get("queue", row["queue"]),
        priority=options.get("priority", row["priority"]),
        retries=row["retries"],
        timeout=row["timeout"],
        lock_key=row["lock_key"],
        delay=options.get("delay"),
        run_at=options.get("run_at"),
        fair_key=fair_key,
    )


def unknown_options(task: str, options: Mapping[str, Any]) -> None:
    """InvalidTaskArguments if ``options`` (of enqueue_many) names one that is not an option."""
    unknown = set(options) - set(ENQUEUE_OPTIONS)
    if unknown:
        raise InvalidTaskArguments(
            f"task {task!r}: unknown enqueue option(s) {', '.join(sorted(unknown))}; "
            f"options are {', '.join(ENQUEUE_OPTIONS)}"
        )
