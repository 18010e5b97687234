"""The jobq tables as SQLAlchemy Core metadata; Alembic revisions must match it exactly."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.db.tasks import Status
from jobq.dialects.types import (
    BigId,
    LongText,
    Moment,
    Seconds,
    partial_index,
    partial_index_where_native,
    table_options,
)

metadata = sa.MetaData()

STATUSES = tuple(s.value for s in Status)

tasks = sa.Table(
    "jobq_tasks",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("queue_id", sa.String(255), nullable=False, server_default="default"),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("args", sa.JSON(), nullable=False),
    sa.Column("status", sa.String(16), nullable=False, server_default=Status.QUEUED.value),
    sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("run_at", Moment, nullable=False),
    sa.Column("retries_left", sa.Integer(), nullable=False),
    # The fencing token: incremented by every capture, checked by every later write.
    sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"),
    # Seconds a capture holds the task before its lease expires; NULL: as the worker's
    # definition of the task says (30 s for a task it does not know).
    sa.Column("lease", Seconds, nullable=True),
    # Seconds the task may run; NULL: as the worker's definition says (none by default).
    sa.Column("timeout", Seconds, nullable=True),
    sa.Column("locked_by", sa.String(255), nullable=True),
    sa.Column("locked_until", Moment, nullable=True),
    sa.Column("unique_key", sa.String(255), nullable=True),
    sa.Column("lock_key", sa.String(255), nullable=True),
    sa.Column("result", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("error", LongText, nullable=True),
    # A cron row: it cycles done -> in_progress -> done instead of finishing.
    sa.Column("recurring", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("created_at", Moment, nullable=False),
    sa.Column("started_at", Moment, nullable=True),
    sa.Column("finished_at", Moment, nullable=True),
    # What the running task last said of its progress: {"current", "total", "message"}.
    sa.Column("progress", sa.JSON(none_as_null=True), nullable=True),
    # When a cancel was asked for while the task ran; cleared when it is queued again.
    sa.Column("cancel_requested_at", Moment, nullable=True),
    # Someone waits for its end: on PostgreSQL its finish notifies channel jobq_ended.
    sa.Column("awaited", sa.Boolean(), nullable=False, server_default=sa.false()),
    # The W3C trace context of the span that enqueued it, {"traceparent", "tracestate"}:
    # the worker's span of each run joins that trace (jobq[otel]).
    sa.Column("trace_context", sa.JSON(none_as_null=True), nullable=True),
    # The workflow (jobq_workflows) this task is a node of; NULL for a task on its own.
    sa.Column("workflow_id", sa.BigInteger(), nullable=True),
    # The key a fair queue shares its captures by (jobq.limits.fair); NULL: none given.
    sa.Column("fair_key", sa.String(255), nullable=True),
    sa.CheckConstraint(sa.column("status").in_(STATUSES), name="jobq_tasks_status_valid"),
    sa.CheckConstraint("retries_left >= 0", name="jobq_tasks_retries_left_nonnegative"),
    **table_options(),
)

c = tasks.c


def status_is(status: Status, columns: Any = c) -> sa.ColumnElement[bool]:
    """``status = '<status>'`` with the constant inline, not as a bound parameter.

    PostgreSQL uses a partial index (or an ON CONFLICT arbiter) only when it can prove
    the query implies the index predicate at plan time; once psycopg prepares a
    statement, a generic plan sees parameters, not values, and proves nothing.
    The values come from the Status enum, never from a caller. ``columns`` are those of
    the tasks table or of an alias of it.
    """
    return columns.status == sa.literal_column(f"'{status.value}'", sa.String)


def has_retries(columns: Any = c) -> sa.ColumnElement[bool]:
    """``retries_left > 0`` with the constant inline, for the same reason."""
    return columns.retries_left > sa.literal_column("0", sa.Integer)


def active(columns: Any = c) -> sa.ColumnElement[bool]:
    """Rows that capture may ever take, now or later (see ACTIVE)."""
    return sa.or_(
        status_is(Status.QUEUED, columns),
        sa.and_(status_is(Status.FAILED, columns), has_retries(columns)),
        status_is(Status.IN_PROGRESS, columns),
        sa.and_(status_is(Status.DONE, columns), columns.recurring),
    )


def waiting(columns: Any = c) -> sa.ColumnElement[bool]:
    """Rows that wait to be captured once due: queued, failed with retries left, or a
    recurring row that is done (of the tasks table or an alias of it)."""
    return sa.or_(
        status_is(Status.QUEUED, columns),
        sa.and_(status_is(Status.FAILED, columns), has_retries(columns)),
        sa.and_(status_is(Status.DONE, columns), columns.recurring),
    )


HAS_RETRIES = has_retries()

#: Rows that wait to be captured: the rows of the capture indexes. Terminal rows (done,
#: terminal failed, cancelled) fall out of them, so capture stays an index scan however
#: many finished rows the table holds; so do running rows, so that a capture does not
#: step over every run in flight (512 rows at 16 workers of 32 slots, revision 0014). A
#: running row whose lease expired is captured through jobq_tasks_lease_expiry instead.
#: Capture repeats this predicate verbatim as one of its AND terms, which is what lets
#: SQLite (and PostgreSQL) pick the partial index.
WAITING = waiting()

#: Rows that capture may ever take, now or later: the waiting ones and the running ones.
ACTIVE = active()

#: Rows whose lock_key other rows of the same key must wait for, or queue behind.
HAS_LOCK_KEY = c.lock_key.is_not(None)

#: Rows that hold their unique_key: waiting, running, or waiting for a retry.
HOLDS_UNIQUE_KEY = sa.and_(
    c.unique_key.is_not(None),
    sa.or_(
        status_is(Status.QUEUED),
        status_is(Status.IN_PROGRESS),
        sa.and_(status_is(Status.FAILED), HAS_RETRIES),
    ),
)

# Capture walks one of these in its ORDER BY and stops at its LIMIT: by queue when it
# names one queue, across queues otherwise (leading with queue_id, that one could only
# give the order after sorting every due row of the backlog).
partial_index(
    "jobq_tasks_capture",
    c.queue_id,
    c.priority.desc(),
    c.run_at,
    c.id,
    where=WAITING,
)
partial_index(
    "jobq_tasks_capture_any_queue",
    c.priority.desc(),
    c.run_at,
    c.id,
    where=WAITING,
)
partial_index("jobq_tasks_unique_key", c.unique_key, where=HOLDS_UNIQUE_KEY, unique=True)
partial_index("jobq_tasks_lease_expiry", c.locked_until, where=c.status == Status.IN_PROGRESS.value)
# Per-task lock keys. Capture looks up a candidate's key among the active rows here; the
# unique index is the guarantee: two rows of one key can never both be in_progress, even
# when two captures race (the loser's statement fails and is retried).
partial_index("jobq_tasks_lock_key", c.lock_key, c.id, where=sa.and_(HAS_LOCK_KEY, ACTIVE))
#: The unique index that lets no two rows of one lock_key be in_progress together.
LOCK_KEY_HELD = "jobq_tasks_lock_key_held"
partial_index(
    LOCK_KEY_HELD,
    c.lock_key,
    where=sa.and_(HAS_LOCK_KEY, status_is(Status.IN_PROGRESS)),
    unique=True,
)
# Retention and the dashboard: every query of it compares finished_at, so it holds the
# finished rows only (revision 0015), not a NULL entry per waiting and running row,
# written at each insert and capture; MySQL has no partial indexes: there it holds all.
partial_index_where_native(
    "jobq_tasks_finished_at", c.finished_at, where=c.finished_at.is_not(None)
)
# A workflow's nodes, for its handle and `jobq workflow show`; tasks on their own are not in it.
partial_index("jobq_tasks_workflow", c.workflow_id, c.id, where=c.workflow_id.is_not(None))
# Nodes waiting for their parents: what the workers' sweep (jobq.workflows.settle) looks at.
partial_index("jobq_tasks_blocked", c.id, where=status_is(Status.BLOCKED))
#: Rows with a fair key: what a fair queue's capture reads key by key, in capture order, and
#: the runs it counts against a key's cap (jobq.limits.fair). Rows without a key, every
#: row of a queue that is not fair, are in neither.
HAS_FAIR_KEY = c.fair_key.is_not(None)
FAIR_INDEX = "jobq_tasks_fair"
FAIR_RUNNING_INDEX = "jobq_tasks_fair_running"
partial_index(
    FAIR_INDEX,
    c.queue_id,
    c.fair_key,
    c.priority.desc(),
    c.run_at,
    c.id,
    where=sa.and_(WAITING, HAS_FAIR_KEY),
)
partial_index(
    FAIR_RUNNING_INDEX,
    c.queue_id,
    c.fair_key,
    where=sa.and_(status_is(Status.IN_PROGRESS), HAS_FAIR_KEY),
)

#: Live workers, for `jobq status`: each worker upserts its row when it starts, touches
#: it with every heartbeat, and deletes it when it stops.
workers = sa.Table(
    "jobq_workers",
    metadata,
    sa.Column("worker_id", sa.String(255), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    # The queues it captures from; NULL means every queue.
    sa.Column("queues", sa.JSON(none_as_null=True), nullable=True),
    sa.Column("concurrency", sa.Integer(), nullable=False),
    sa.Column("started_at", Moment, nullable=False),
    sa.Column("last_seen", Moment, nullable=False),
    # The `jobq worker --processes N` supervisor that started it (same host), or NULL.
    sa.Column("supervisor_pid", sa.Integer(), nullable=True),
    **table_options(),
)

#: The locks of jobq.locks, one row per name: a Mutex (``acquired``), a TimeoutLock
#: (``acquired_at`` is its last acquisition) or a Lease (``owner`` and ``expires_at``).
LOCK_KINDS = ("mutex", "timeout", "lease")

locks = sa.Table(
    "jobq_locks",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("acquired", sa.Boolean(), nullable=False, server_default=sa.false()),
    # A lease's owner token; renew and release name it, and apply only while it matches.
    sa.Column("owner", sa.String(255), nullable=True),
    # Who took it: host:pid, and the owner for a lease.
    sa.Column("locked_by", sa.String(255), nullable=True),
    sa.Column("acquired_at", Moment, nullable=True),
    sa.Column("expires_at", Moment, nullable=True),
    sa.CheckConstraint(sa.column("kind").in_(LOCK_KINDS), name="jobq_locks_kind_valid"),
    **table_options(),
)
sa.Index("jobq_locks_expires_at", locks.c.expires_at)

#: Cron schedules (jobq.cron.periodic): each names its one recurring row of the tasks table,
#: which cycles done -> in_progress -> done, and says when that row's next tick is.
schedules = sa.Table(
    "jobq_schedules",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column(
        "task_id",
        BigId,
        sa.ForeignKey("jobq_tasks.id", ondelete="CASCADE", name="jobq_schedules_task_id_fkey"),
        nullable=False,
    ),
    sa.Column("cron", sa.String(255), nullable=False),
    sa.Column("timezone", sa.String(64), nullable=False),
    # The retries_left each tick starts with.
    sa.Column("retries", sa.Integer(), nullable=False),
    # The lock key of its arguments; the row takes it when a tick ends.
    sa.Column("lock_key", sa.String(255), nullable=True),
    # Switched by operators (`jobq cron disable/enable`); workers never change it.
    sa.Column("enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
    # False once a worker serving its queue started without it in its app.
    sa.Column("defined", sa.Boolean(), nullable=False, server_default=sa.true()),
    # How the last run ended: done, failed or cancelled; NULL before the first.
    sa.Column("last_status", sa.String(16), nullable=True),
    sa.Column("created_at", Moment, nullable=False),
    sa.Column("updated_at", Moment, nullable=False),
    sa.UniqueConstraint("task_id", name="jobq_schedules_task_id_key"),
    **table_options(),
)

#: The last runs of each schedule (jobq.cron.runs): one row per end of a run of its
#: recurring row, written with that end; past the newest few per schedule, the oldest go.
schedule_runs = sa.Table(
    "jobq_schedule_runs",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    # The schedule's name; no foreign key: a schedule is never deleted, and its runs are
    # a log, written without locking its jobq_schedules row.
    sa.Column("schedule", sa.String(255), nullable=False),
    sa.Column("task_id", sa.BigInteger(), nullable=False),
    sa.Column("attempt", sa.Integer(), nullable=False),
    # done, failed, timed out, lease expired, cancelled or released.
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("started_at", Moment, nullable=False),
    sa.Column("finished_at", Moment, nullable=False),
    sa.Column("error", LongText, nullable=True),
    **table_options(),
)
sa.Index("jobq_schedule_runs_schedule", schedule_runs.c.schedule, schedule_runs.c.id)

#: Per-queue limits (jobq.limits): at most ``concurrency`` rows of the queue in progress,
#: at most ``rate_count`` starts in any ``rate_period`` seconds. ``generation`` is drawn
#: afresh by every change, so a limiter keeping its own state (TigerBeetle) can tell one
#: setting from the next, even after a clear and a set of the same values. A paused queue
#: (``paused``) has a row too, limited or not: no capture takes from a queue with a row
#: unless its limiter does, and limiters take nothing from a paused queue.
limits = sa.Table(
    "jobq_limits",
    metadata,
    sa.Column("queue", sa.String(255), primary_key=True),
    sa.Column("concurrency", sa.Integer(), nullable=True),
    sa.Column("rate_count", sa.Integer(), nullable=True),
    sa.Column("rate_period", Seconds, nullable=True),
    sa.Column("generation", sa.BigInteger(), nullable=False),
    sa.Column("updated_at", Moment, nullable=False),
    sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
    # A fair queue (jobq.limits.fair): captures share it between fair keys by weight;
    # a key without a weight of its own has ``default_weight``, and at most
    # ``max_running_per_key`` runs of one key are in progress (NULL: no cap).
    sa.Column("fair", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("default_weight", sa.Integer(), nullable=True),
    sa.Column("max_running_per_key", sa.Integer(), nullable=True),
    # Where a fair queue's last capture stopped: the last key it visited, and how many rows
    # of that key's visit it took when the capture was full before the visit ended (0: the
    # visit ended; the next capture starts after the key).
    sa.Column("fair_cursor", sa.String(255), nullable=True),
    sa.Column("fair_cursor_taken", sa.Integer(), nullable=False, server_default="0"),
    sa.CheckConstraint("concurrency >= 1", name="jobq_limits_concurrency_positive"),
    sa.CheckConstraint(
        "(rate_count IS NULL AND rate_period IS NULL) OR (rate_count IS NOT NULL"
        " AND rate_period IS NOT NULL AND rate_count >= 1 AND rate_period > 0)",
        name="jobq_limits_rate_valid",
    ),
    sa.CheckConstraint(
        "concurrency IS NOT NULL OR rate_count IS NOT NULL OR paused OR fair",
        name="jobq_limits_not_empty",
    ),
    sa.CheckConstraint(
        "default_weight >= 1 AND max_running_per_key >= 1", name="jobq_limits_fair_valid"
    ),
    **table_options(),
)

#: Queues whose finished tasks are kept for a time of their own (`jobq queues retain`),
#: not for the workers' --retain: ``retain_seconds`` NULL keeps them forever. The elected
#: worker prunes them (jobq.upkeep.retention).
queue_retention = sa.Table(
    "jobq_queue_retention",
    metadata,
    sa.Column("queue", sa.String(255), primary_key=True),
    sa.Column("retain_seconds", Seconds, nullable=True),
    sa.Column("updated_at", Moment, nullable=False),
    sa.CheckConstraint("retain_seconds > 0", name="jobq_queue_retention_positive"),
    **table_options(),
)

#: When tasks of rate-limited queues started, by the database's clock; rows older than
#: the queue's period are deleted by the next capture from that queue.
limit_starts = sa.Table(
    "jobq_limit_starts",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.String(255), nullable=False),
    sa.Column("started_at", Moment, nullable=False),
    **table_options(),
)
sa.Index("jobq_limit_starts_queue", limit_starts.c.queue, limit_starts.c.started_at)

#: Workflows (jobq.workflows): one row each, named by its nodes' ``workflow_id``.
workflows = sa.Table(
    "jobq_workflows",
    metadata,
    sa.Column("id", BigId, primary_key=True, autoincrement=True),
    # How many nodes it has (its tasks hold its id).
    sa.Column("nodes", sa.Integer(), nullable=False),
    sa.Column("created_at", Moment, nullable=False),
    **table_options(),
)

#: The edges of workflows: ``child_id`` runs once every ``parent_id`` of it is done. Each
#: parent's end writes its own edge rows (``parent_done``), never its child's task row, so
#: many parents ending at once into one child do not queue up behind a lock on that row.
#: ``position`` is the parent's place in the child's ``after=`` list.
task_edges = sa.Table(
    "jobq_task_edges",
    metadata,
    sa.Column(
        "child_id",
        BigId,
        sa.ForeignKey("jobq_tasks.id", ondelete="CASCADE", name="jobq_task_edges_child_id_fkey"),
        primary_key=True,
    ),
    sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
    sa.Column("parent_id", sa.BigInteger(), nullable=False),
    sa.Column("parent_done", sa.Boolean(), nullable=False, server_default=sa.false()),
    **table_options(),
)
sa.Index("jobq_task_edges_parent", task_edges.c.parent_id)
# Whether a child still waits: one probe for an edge not done. Marking an edge done leaves
# its old index entry behind until vacuum (PostgreSQL) or purge (InnoDB), and parents end
# roughly in their order, so the probe walks positions from the last: it meets an edge
# still undone first instead of stepping over every dead entry of those done. Partial
# where it can be (MySQL indexes every edge), so that no planner prefers the primary key.
partial_index_where_native(
    "jobq_task_edges_pending",
    task_edges.c.child_id,
    task_edges.c.parent_done,
    task_edges.c.position.desc(),
    where=task_edges.c.parent_done == sa.false(),
)

#: The keys of fair queues (jobq.limits.fair), one row per (queue, key). Captures visit the
#: keys that are not ``idle`` in key order, round and round (deficit round robin: each visit
#: takes up to the key's weight in rows); where the last capture stopped is the queue's
#: jobq_limits row's cursor. ``idle``: nothing of the key waited or ran when a capture
#: looked, so captures skip it until an enqueue of the key wakes it. ``version`` grows with
#: every enqueue of the key: a capture idles a key only while it is the version the capture
#: read, so it never idles a key whose new row it could not yet see. ``weight``: the key's
#: own (NULL: the queue's).
fair_keys = sa.Table(
    "jobq_fair_keys",
    metadata,
    sa.Column("queue", sa.String(255), primary_key=True),
    sa.Column("fair_key", sa.String(255), primary_key=True),
    sa.Column("weight", sa.Integer(), nullable=True),
    sa.Column("idle", sa.Boolean(), nullable=False, server_default=sa.false()),
    sa.Column("version", sa.BigInteger(), nullable=False, server_default="0"),
    sa.CheckConstraint("weight >= 1", name="jobq_fair_keys_weight_positive"),
    **table_options(),
)
#: The keys a capture visits, in key order; idle keys are left out where partial indexes
#: exist.
partial_index_where_native(
    "jobq_fair_keys_awake",
    fair_keys.c.queue,
    fair_keys.c.fair_key,
    where=fair_keys.c.idle == sa.false(),
)
