"""MariaDB's and MySQL's read of a fair queue's keys' rows: one walk planned once.

The portable read, a UNION ALL of a subquery per key, costs MariaDB a plan per member:
0.25 ms or more a key (25 ms for the 100 keys of a capture of 100), whatever the rows
read. Here every key's rows are read by one recursive CTE over a JSON list of the keys:
each step takes a key's next row, the first after the one before in capture order, with
a correlated ``LIMIT 1`` subquery along jobq_tasks_fair. MariaDB plans that subquery once
and runs it once a row found: 2.3 ms for 100 keys of one row each, 4.2 for two each. A
key that may win more than a few rows is read by a statement of its own (WALK_MOST).

A subquery cannot lock what it reads, so the rows found are then locked by primary key
(SKIP LOCKED, as the portable read), their capturability checked again under the lock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.dialects.fair import FairStatements, picked_ids, picked_params
from jobq.dialects.schema import tasks

c = tasks.c

#: The fields of each record of the walk's JSON list of keys.
CHOSEN_FIELDS = (("position", sa.Integer()), ("fair_key", sa.String()), ("want", sa.Integer()))

#: The most rows of one key the walk reads; a key that may win more of a capture's rows
#: (there are few such keys: a page shorter than the capture, a heavy weight) is read by
#: a statement of its own, as its steps each look along the key from its first row again:
#: 100 rows of one key cost the walk 8 ms, a statement of their own 0.7.
WALK_MOST = 8


class WalkFairRows(FairStatements):
    """fair_rows as one recursive walk of every key's rows, then a lock of what it found
    (see the module's docstring)."""

    def _next_row(self, fair_key: Any, after: sa.FromClause | None) -> sa.ScalarSelect[Any]:
        """The id of key ``fair_key``'s first capturable row of ``f_queue`` in capture order,
        after row ``after`` (an alias of the tasks table) if given; correlated."""
        stmt = sa.select(c.id).where(self.capturable_of_key(fair_key))
        if after is not None:
            p = after.c
            stmt = stmt.where(
                sa.or_(
                    c.priority < p.priority,
                    sa.and_(
                        c.priority == p.priority,
                        sa.or_(
                            c.run_at > p.run_at,
                            sa.and_(c.run_at == p.run_at, c.id > p.id),
                        ),
                    ),
                )
            )
        return stmt.order_by(c.priority.desc(), c.run_at, c.id).limit(1).scalar_subquery()

    def _walk(self) -> sa.Select[Any]:
        """(position, id) of the next rows of the keys of ``f_chosen`` (JSON records of
        position, fair_key and want), at most ``want`` of each, in capture order."""
        chosen = self.json_records(sa.bindparam("f_chosen", type_=sa.Text), CHOSEN_FIELDS)
        first = sa.select(
            chosen.c.position,
            chosen.c.fair_key,
            chosen.c.want,
            sa.literal_column("1", sa.Integer).label("step"),
            self._next_row(chosen.c.fair_key, None).label("id"),
        )
        walk = first.cte("walk", recursive=True)
        before = walk.alias("before_row")
        prev = tasks.alias("prev")
        walk = walk.union_all(
            sa.select(
                before.c.position,
                before.c.fair_key,
                before.c.want,
                before.c.step + sa.literal_column("1", sa.Integer),
                self._next_row(before.c.fair_key, prev),
            )
            .select_from(before.join(prev, prev.c.id == before.c.id))
            .where(before.c.step < before.c.want)
        )
        return (
            sa.select(walk.c.position, walk.c.id)
            .where(walk.c.id.is_not(None))
            .order_by(walk.c.position, walk.c.step)
        )

    def _lock_found(self, width: int) -> sa.Select[Any]:
        """Of the ``width`` ids ``picked_0``..., those still capturable, locked."""
        return (
            sa.select(c.id)
            .where(c.id.in_(picked_params(width)), self.capturable_waiting(self.now()))
            .with_for_update(skip_locked=True)
        )

    def fair_rows(
        self, conn: Connection, keys: Sequence[str], wants: Sequence[int], queue: str
    ) -> list[tuple[int, int]]:
        walked = [i for i, want in enumerate(wants) if want <= WALK_MOST]
        read = [i for i, want in enumerate(wants) if want > WALK_MOST]
        found = self._walked(conn, [(i, keys[i], wants[i]) for i in walked], queue)
        if read:  # few keys (each wants more than WALK_MOST of the capture's rows)
            params: dict[str, Any] = {"f_queue": queue}
            for n, i in enumerate(read):
                params[f"key_{n}"], params[f"want_{n}"] = keys[i], wants[i]
            members: Sequence[Sequence[Any]] = self.run_prepared(
                conn, ("fair rows read", len(read)), lambda: self._read(len(read)), params
            ).all()
            found += [(read[row[0]], row[1]) for row in members]
        return found

    def _read(self, count: int) -> sa.CompoundSelect:
        """(n, id): the next rows of keys ``key_<n>`` of ``f_queue``, at most ``want_<n>``
        of each, in capture order, locked (SKIP LOCKED): a UNION ALL of a statement a key."""
        return sa.union_all(
            *(self.fair_key_rows(n).with_for_update(skip_locked=True) for n in range(count))
        )

    def _walked(
        self, conn: Connection, chosen: list[tuple[int, str, int]], queue: str
    ) -> list[tuple[int, int]]:
        """(position, id): the rows the walk finds of the keys ``chosen`` (position, key,
        want), those still capturable locked."""
        if not chosen:
            return []
        records = [{"position": i, "fair_key": key, "want": want} for i, key, want in chosen]
        params = {"f_queue": queue, "f_chosen": json.dumps(records)}
        found: Sequence[Sequence[Any]] = self.run_prepared(
            conn, "fair rows walk", self._walk, params
        ).all()
        if not found:
            return []
        width, picked = picked_ids([row[1] for row in found])
        lock = self.run_prepared(
            conn, ("fair rows lock", width), lambda: self._lock_found(width), picked
        )
        locked = set(lock.scalars())
        return [(row[0], row[1]) for row in found if row[1] in locked]
