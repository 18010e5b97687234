"""What capture and enqueue write into a task row, as SQL, and the portable INSERTs of tasks.

Dialect's methods of the same names call these with their own clock, so that a dialect
only supplies the database's time (now, now_plus) and the shape of its statements.
"""

from __future__ import annotations

from typing import Any, Protocol

import sqlalchemy as sa

from jobq.db.tasks import Status
from jobq.dialects.leases import lease_of
from jobq.dialects.schema import status_is, tasks

c = tasks.c

#: Columns of a new task bound per call, as parameters named ``new_<column>``.
NEW_ROW_PARAMETERS = (
    "name", "queue_id", "priority", "retries_left", "lease", "timeout", "unique_key", "lock_key",
)  # fmt: skip

#: Columns of a new task bound only where given (``extra`` of new_row_values): a row
#: without them keeps the statements it had before they existed, with nothing more to bind.
OPTIONAL_ROW_PARAMETERS = ("trace_context", "fair_key")


def optional_columns(params: dict[str, Any]) -> tuple[str, ...]:
    """The optional columns a new row of ``params`` binds: those it has a value for. Rows
    without (every row, without jobq[otel] or fair keys) keep their statements."""
    return tuple(name for name in OPTIONAL_ROW_PARAMETERS if params.get(f"new_{name}") is not None)


class Clock(Protocol):
    """The database's clock, as a dialect gives it (Dialect.now, Dialect.now_plus)."""

    def now(self) -> sa.ColumnElement[Any]:
        """The database's current time."""
        ...

    def now_plus(self, seconds: sa.ColumnElement[Any] | float) -> sa.ColumnElement[Any]:
        """The database's current time plus ``seconds``."""
        ...


def capture_values(
    clock: Clock, *, named_leases: int | None, now: sa.ColumnElement[Any]
) -> dict[str, Any]:
    """The SET clause of a capture: new attempt, owner, lease; a retry costs one retry.

    Parameters: ``worker_id``, and the leases (see lease_of).
    """
    return {
        "status": Status.IN_PROGRESS.value,
        "attempt": c.attempt + 1,
        "locked_by": sa.bindparam("worker_id", type_=sa.String),
        "locked_until": clock.now_plus(lease_of(named_leases)),
        "started_at": now,
        "finished_at": None,
        # A failed row, or a running row whose lease expired, spends a retry.
        "retries_left": sa.case(
            (
                sa.or_(status_is(Status.FAILED), status_is(Status.IN_PROGRESS)),
                c.retries_left - 1,
            ),
            else_=c.retries_left,
        ),
    }


def new_row_values(clock: Clock, timing: str, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The column values of a new task: ``new_<column>`` parameters, constants, clock.

    ``timing`` says where run_at comes from: 'at' (``new_run_at``), 'delay'
    (``new_delay`` seconds after the database's now) or 'now'. ``extra`` names columns of
    OPTIONAL_ROW_PARAMETERS the row binds too (``new_trace_context``, ``new_fair_key``);
    the others stay NULL, with nothing to bind.
    """
    columns = (*NEW_ROW_PARAMETERS, *extra)
    values: dict[str, Any] = {
        column: sa.bindparam(f"new_{column}", type_=c[column].type) for column in columns
    }
    if timing == "at":
        values["run_at"] = sa.bindparam("new_run_at", type_=c.run_at.type)
    elif timing == "delay":
        values["run_at"] = clock.now_plus(sa.bindparam("new_delay", type_=sa.Float))
    else:
        values["run_at"] = clock.now()
    values.update(
        status=sa.literal(Status.QUEUED.value, sa.String),
        attempt=sa.literal(0, sa.Integer),
        recurring=sa.literal(False, sa.Boolean),
        created_at=clock.now(),
    )
    return values


def insert_one(values: dict[str, Any]) -> sa.Executable:
    """INSERT of one task of ``values`` (new_row_values'), plus ``new_args``, returning its id."""
    return (
        sa.insert(tasks)
        .values(**values, args=sa.bindparam("new_args", type_=c.args.type))
        .returning(c.id)
    )


def insert_many(
    values: dict[str, Any], rows: tuple[sa.ColumnElement[Any], sa.ColumnElement[Any]]
) -> sa.Executable:
    """INSERT of one task of ``values`` (new_row_values') per element of a JSON array, given
    as ``rows`` (element, position: Dialect.json_array_rows), returning the ids in array
    order once sorted."""
    value, position = rows
    select = sa.select(*values.values(), value).order_by(position)
    return sa.insert(tasks).from_select([*values, "args"], select).returning(c.id)
