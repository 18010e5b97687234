"""Fair queues (``store.fair_queues``): captures shared between tenants by weight.

A fair queue serves each fair key (a tenant, a customer: ``@app.task(fair_key=...)`` or
``_fair_key=`` at enqueue) in proportion to its weight, so that one key's backlog of a
hundred thousand rows does not hold up another key's single row; at most
``max_running_per_key`` runs of one key at once. Rows without a key share one key of their
own, ``""``. The queue's setting is its jobq_limits row (``fair``), which also keeps where
the captures' round of the keys in jobq_fair_keys stands (jobq.limits.fair_capture).

Made on a TaskStore, it is the store's hook ``fair_keys`` (jobq.core.hooks): an enqueue into
a fair queue stores a keyless row with the key ``""`` and wakes the row's key in its own
transaction. A Store learns that a queue became fair from its copy of jobq_limits (read at
most a second before); rows written meanwhile by Stores that did not know yet are found by
settle(), which making a queue fair runs, and the elected worker's upkeep after it.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.db.errors import InvalidOption
from jobq.db.validation import check_key
from jobq.dialects.schema import FAIR_INDEX, fair_keys, limits, tasks, waiting
from jobq.limits import FairShare, check_count
from jobq.limits.sql import Limits, share_of

if TYPE_CHECKING:
    from jobq.core.store import TaskStore

c = tasks.c
k = fair_keys.c
lc = limits.c

#: The key of a fair queue's rows that were given none.
KEYLESS = ""

#: Rows a statement of settle() gives the key ``""`` at most (an IN list of their ids).
SETTLE_BATCH = 500


class FairQueues:
    """Fair queues: make a queue fair or plain again, weigh its keys, read the settings.

    Example:
        ```python
        import jobq

        store = jobq.Store()
        store.migrate()
        share = store.fair_queues.make_fair("reports", weights={"acme": 3}, max_running_per_key=2)
        assert str(share) == "fair, default weight 1, at most 2 running per key"
        assert store.fair_queues.weights("reports") == {"acme": 3}
        assert store.fair_queues.make_unfair("reports")
        ```
    """

    def __init__(self, store: TaskStore) -> None:
        self.store = store
        self.db = store.db
        self.dialect = store.dialect
        self._limits = store.capability(Limits)
        store.hooks.fair_keys = self
        store.hooks.after_retry.append(self._retried)

    # --- the hook fair_keys (jobq.core.hooks) -----------------------------------------

    def key_of(
        self, queue: str, fair_key: str | None, connection: Connection | None
    ) -> tuple[str | None, bool]:
        """The key a new row of ``queue`` is stored with, and whether the queue is fair (the
        settings read, when stale, on the enqueue's ``connection`` if it has one)."""
        fair = queue in self._limits.fair_shares(connection)
        return (KEYLESS if fair_key is None and fair else fair_key), fair

    def refresh(self) -> None:
        """Read jobq_limits now if this Store's copy of it is old (key_of then reads none)."""
        self._limits.fair_shares()

    def enqueued(self, conn: Connection, queue: str, keys: Sequence[str]) -> None:
        """Wake ``keys`` of fair ``queue`` in ``conn``'s transaction (in key order, as every
        writer of key rows goes, so that two never wait for each other)."""
        rows = [{"f_queue": queue, "f_key": key} for key in sorted(set(keys))]
        conn.execute(self.dialect.wake_fair_key(), rows)

    def released(self, conn: Connection, ids: Sequence[int]) -> None:
        """Rows ``ids`` wait again without an enqueue, in ``conn``'s transaction (a
        workflow's node released, an operator's retry): wake the keys of those of fair
        queues there, a row without a key given the key ``""`` (else a key idled
        meanwhile, or no key, would leave them to the upkeep's settle). Nothing is read
        while this Store knows no fair queue."""
        fair = self._limits.fair_shares(conn)
        if not fair or not ids:
            return
        found = conn.execute(
            sa.select(c.id, c.queue_id, c.fair_key).where(c.id.in_(list(ids)), waiting(c))
        ).all()
        keys: dict[str, set[str]] = {}
        keyless: dict[str, list[int]] = {}
        for id, queue, key in found:
            if queue in fair:
                if key is None:
                    keyless.setdefault(queue, []).append(id)
                keys.setdefault(queue, set()).add(KEYLESS if key is None else key)
        for queue, given in keyless.items():
            conn.execute(_give_keyless_key(queue, c.id.in_(given)))
        for queue, woken in sorted(keys.items()):
            self.enqueued(conn, queue, sorted(woken))

    def _retried(self, conn: Connection, id: int) -> int:
        """The hook after_retry: task ``id`` waits again (Store.retry); its key wakes."""
        self.released(conn, [id])
        return 0

    # --- settings -------------------------------------------------------------------

    def make_fair(
        self,
        queue: str,
        *,
        weights: Mapping[str, int] | None = None,
        default_weight: int = 1,
        max_running_per_key: int | None = None,
    ) -> FairShare:
        """Make ``queue`` fair: its captures serve each fair key in proportion to its weight.

        A second call changes the setting; the weights given are set, others kept. The
        queue's limit or pause, if any, stays: a limit bounds the queue, fairness shares
        what the limit lets through.

        Args:
            queue: the queue's name.
            weights: a weight (1 or more) for some keys; the others have ``default_weight``.
            default_weight: the weight of a key without one of its own.
            max_running_per_key: the most runs of one key at once (None: no cap).

        Returns:
            The FairShare stored.

        Raises:
            InvalidOption: an empty queue name or key; a weight or cap below 1.
        """
        check_key("queue", queue, required=True)
        share = FairShare(queue, default_weight, max_running_per_key)
        weights = dict(weights or {})
        for key, weight in weights.items():
            check_key("weight", key, required=True)
            check_count("weight", weight, f"key {key!r}: ")
        now = self.dialect.now()
        setting = {
            "fair": True,
            "default_weight": default_weight,
            "max_running_per_key": max_running_per_key,
            "updated_at": now,
        }
        row = {"queue": queue, "generation": secrets.randbits(62) + 1, **setting}

        def make(conn: Connection) -> None:
            conn.execute(self.dialect.upsert_statement(limits, lc.queue, row, setting))
            for key, weight in sorted(weights.items()):
                # A new key row is idle: it has no work until an enqueue wakes it.
                values = {"queue": queue, "fair_key": key, "weight": weight, "idle": True}
                upsert = self.dialect.upsert_statement(
                    fair_keys, [k.queue, k.fair_key], values, {"weight": weight}
                )
                conn.execute(upsert)
            self._settle(conn, queue)
            self.dialect.wake_for_limits(conn, queue)

        self.db.write(make, atomic=True)
        self._limits.forget()
        return share

    def make_unfair(self, queue: str) -> bool:
        """Capture ``queue`` in plain order again (priority, due time, id); its keys' turns
        and weights are forgotten. False if it was not fair. InvalidOption for an empty
        queue name."""
        check_key("queue", queue, required=True)

        def unmake(conn: Connection) -> bool:
            ours = sa.and_(lc.queue == queue, lc.fair)
            plain = sa.and_(lc.concurrency.is_(None), lc.rate_count.is_(None), sa.not_(lc.paused))
            done = conn.execute(sa.delete(limits).where(ours, plain)).rowcount
            if not done:
                update = sa.update(limits).where(ours)
                done = conn.execute(
                    update.values(fair=False, default_weight=None, max_running_per_key=None)
                ).rowcount
            conn.execute(sa.delete(fair_keys).where(k.queue == queue))
            self.dialect.wake_for_limits(conn, queue)
            return bool(done)

        unmade = self.db.write(unmake, atomic=True)
        self._limits.forget()
        return unmade

    def shares(self) -> dict[str, FairShare]:
        """Every fair queue's setting, by queue name, as stored now."""
        stmt = sa.select(limits).where(lc.fair).order_by(lc.queue)
        with self.db.unit(read_only=True) as conn:
            return {row.queue: share_of(row) for row in conn.execute(stmt)}

    def weights(self, queue: str) -> dict[str, int]:
        """The keys of ``queue`` with a weight of their own, and their weights."""
        stmt = (
            sa.select(k.fair_key, k.weight)
            .where(k.queue == queue, k.weight.is_not(None))
            .order_by(k.fair_key)
        )
        with self.db.unit(read_only=True) as conn:
            return {key: weight for key, weight in conn.execute(stmt)}

    def waiting_keys(self) -> dict[str, int]:
        """For each fair queue, how many of its keys are not idle (have rows waiting or
        running, as its captures last saw)."""
        stmt = (
            sa.select(k.queue, sa.func.count())
            .where(k.idle == sa.false())
            .group_by(k.queue)
            .order_by(k.queue)
        )
        with self.db.unit(read_only=True) as conn:
            return {queue: count for queue, count in conn.execute(stmt)}

    # --- why a row waits ------------------------------------------------------------

    def position(self, queue: str, fair_key: str | None, row_id: int) -> dict[str, Any] | None:
        """Where a waiting row of ``queue`` stands among its keys (None if the queue is not
        fair): its key, the key's weight, cap and runs, whether the key is in turn (not
        idle), how many keys with work the captures visit before it, and how many rows of
        its own key come before it."""
        shares = self.shares()
        share = shares.get(queue)
        if share is None:
            return None
        found: dict[str, Any] = {"key": fair_key, "cap": share.max_running_per_key}
        if fair_key is None:
            return found
        with self.db.unit(read_only=True) as conn:
            key = conn.execute(
                sa.select(k.weight, k.idle).where(k.queue == queue, k.fair_key == fair_key)
            ).first()
            of_key = (c.queue_id == queue, c.fair_key == fair_key)
            found["running"] = conn.execute(
                sa.select(sa.func.count()).where(*of_key, c.status == "in_progress")
            ).scalar()
            me = sa.select(c.priority, c.run_at).where(c.id == row_id).subquery()
            ahead = sa.or_(
                c.priority > me.c.priority,
                sa.and_(c.priority == me.c.priority, c.run_at < me.c.run_at),
                sa.and_(c.priority == me.c.priority, c.run_at == me.c.run_at, c.id < row_id),
            )
            found["rows_ahead"] = conn.execute(
                sa.select(sa.func.count()).select_from(me).where(*of_key, waiting(c), ahead)
            ).scalar()
            if key is None or key.idle:
                found["in_turn"] = False
                return found
            found.update(in_turn=True, weight=key.weight or share.default_weight)
            cursor = conn.execute(
                sa.select(lc.fair_cursor, lc.fair_cursor_taken).where(lc.queue == queue)
            ).one()
            before = _visited_before(fair_key, cursor.fair_cursor, cursor.fair_cursor_taken)
            found["keys_ahead"] = conn.execute(
                sa.select(sa.func.count()).where(k.queue == queue, k.idle == sa.false(), before)
            ).scalar()
        return found

    # --- settling -------------------------------------------------------------------

    def settle(self, queue: str) -> int:
        """Give ``queue``'s waiting rows written without a key the key ``""``, and wake the
        keys of its waiting rows that have no row in jobq_fair_keys or an idle one: rows
        written by Stores that did not yet know the queue was fair, and rows made to wait
        again without an enqueue (a workflow's release, an operator's retry). How many
        rows and keys it changed.

        It scans the queue's waiting rows in a read of its own, and writes (a short
        transaction) only what it found to change: on SQLite a write transaction holds
        every other writer off, and the scan of a million rows takes half a second."""
        with self.db.unit(read_only=True) as conn:
            if not _is_fair(conn, queue):
                return 0
            keyless = list(conn.execute(_keyless_rows(queue)).scalars())
            asleep = self._asleep(conn, queue, {KEYLESS} if keyless else set())
        if not keyless and not asleep:
            return 0

        def write(conn: Connection) -> int:
            if not _is_fair(conn, queue):
                return 0
            keyed = 0
            for start in range(0, len(keyless), SETTLE_BATCH):
                batch = keyless[start : start + SETTLE_BATCH]
                # Only rows still keyless and waiting: the read was in a transaction before.
                keyed += conn.execute(_give_keyless_key(queue, c.id.in_(batch))).rowcount
            if asleep:  # woken since the read, a key only moves its version on: harmless
                self.enqueued(conn, queue, asleep)
            return int(keyed) + len(asleep)

        return self.db.write(write, atomic=True)

    def _settle(self, conn: Connection, queue: str) -> None:
        """settle() in ``conn``'s transaction (making the queue fair): its rows without a key
        given the key ``""`` in one statement, whatever their number."""
        conn.execute(_give_keyless_key(queue, sa.true()))
        asleep = self._asleep(conn, queue)
        if asleep:
            self.enqueued(conn, queue, asleep)

    def _asleep(
        self, conn: Connection, queue: str, also: AbstractSet[str] = frozenset()
    ) -> list[str]:
        """The keys of ``queue``'s waiting rows, and ``also``, that have no row in
        jobq_fair_keys, or an idle one; a scan of the queue's waiting rows with a key."""
        found = sa.select(c.fair_key).where(
            self.dialect.within(FAIR_INDEX),
            c.queue_id == queue,
            c.fair_key.is_not(None),
            waiting(c),
        )
        keys = {key for (key,) in conn.execute(found.distinct())} | also
        awake = conn.execute(
            sa.select(k.fair_key).where(k.queue == queue, k.idle == sa.false())
        ).scalars()
        return sorted(keys - set(awake))


def _keyless_rows(queue: str) -> sa.Select[Any]:
    """The ids of ``queue``'s waiting rows without a key."""
    return sa.select(c.id).where(c.queue_id == queue, c.fair_key.is_(None), waiting(c))


def _give_keyless_key(queue: str, among: sa.ColumnElement[bool]) -> sa.Update:
    """Give ``queue``'s waiting rows without a key, ``among`` these, the key ``""``."""
    return (
        sa.update(tasks)
        .where(among, c.queue_id == queue, c.fair_key.is_(None), waiting(c))
        .values(fair_key=KEYLESS)
    )


def _visited_before(fair_key: str, cursor: str | None, taken: int) -> sa.ColumnElement[bool]:
    """The keys that captures visit before ``fair_key``, from where the last one stopped
    (jobq.limits.fair_capture): the ring starts at the key ``cursor`` if its visit was cut
    short (``taken``), else after it; the database compares the keys."""
    if cursor is None:
        return k.fair_key < fair_key
    start = sa.literal(cursor, sa.String)

    def first_half(key: sa.ColumnElement[Any]) -> sa.ColumnElement[bool]:
        return key >= start if taken > 0 else key > start

    me = sa.literal(fair_key, sa.String)
    return sa.and_(
        k.fair_key != fair_key,
        sa.or_(
            sa.and_(first_half(k.fair_key), sa.or_(k.fair_key < me, sa.not_(first_half(me)))),
            sa.and_(sa.not_(first_half(k.fair_key)), sa.not_(first_half(me)), k.fair_key < me),
        ),
    )


def _is_fair(conn: Connection, queue: str) -> bool:
    """Whether ``queue`` is fair, read on ``conn`` (in a transaction that may be making it so)."""
    return bool(conn.execute(sa.select(lc.fair).where(lc.queue == queue)).scalar())


def parse_weights(values: Sequence[str]) -> dict[str, int]:
    """``KEY=N`` texts (`jobq queues fair --weight`) as weights by key; InvalidOption for one
    that is not KEY=N with N a whole number."""
    weights: dict[str, int] = {}
    for value in values:
        key, sep, number = value.rpartition("=")
        if not sep or not key or not number.strip().isdigit():
            raise InvalidOption(option="weight", reason=f"{value!r} is not KEY=N, such as acme=3")
        weights[key] = int(number)
    return weights
