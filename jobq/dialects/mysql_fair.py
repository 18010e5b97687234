"""MariaDB's and MySQL's read of a fair queue's keys' rows: one walk planned once.

The portable read, a UNION ALL of a subquery per key, costs MariaDB a plan per member:
0.25 ms or more a key (25 ms for the 100 keys of a capture of 100), whatever the rows
read. Here every key's rows are read by one recursive CTE over a JSON list of the keys:
each step takes a key's next row, the first after the one before in capture order, with
a correlated ``LIMIT 1`` subquery along jobq_tasks_fair. MariaDB plans that subquery once
and runs it once a row found: 2.3 ms for 100 keys of one row each, 4.2 for two each.

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
from jobq.dialects.schema import FAIR_INDEX, tasks

c = tasks.c

#: The fields of each record of the walk's JSON list of keys.
CHOSEN_FIELDS = (("position", sa.Integer()), ("fair_key", sa.String()), ("want", sa.Integer()))

#: The most rows of one key a capture reads: MySQL stops a recursive CTE at
#: cte_max_recursion_depth (1,000 unless set), and each step is one row of a key.
MOST_OF_A_KEY = 1000


class WalkFairRows(FairStatements):
    """fair_rows as one recursive walk of every key's rows, then a lock of what it found
    (see the module's docstring)."""

    def _next_row(self, fair_key: Any, after: sa.FromClause | None) -> sa.ScalarSelect[Any]:
        """The id of key ``fair_key``'s first capturable row of ``f_queue`` in capture order,
        after row ``after`` (an alias of the tasks table) if given; correlated."""
        stmt = sa.select(c.id).where(
            self.within(FAIR_INDEX),
            c.queue_id == sa.bindparam("f_queue", type_=sa.String),
            c.fair_key == fair_key,
            c.fair_key.is_not(None),
            self.capturable_waiting(self.now()),
        )
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
        chosen = json.dumps(
            [
                {"position": i, "fair_key": key, "want": min(want, MOST_OF_A_KEY)}
                for i, (key, want) in enumerate(zip(keys, wants, strict=True))
            ]
        )
        params = {"f_queue": queue, "f_chosen": chosen}
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
