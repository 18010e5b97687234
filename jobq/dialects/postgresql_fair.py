"""PostgreSQL's read of a fair queue's keys' rows: one LATERAL join, one statement shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import Grouping

from jobq.dialects.fair import FairStatements
from jobq.dialects.schema import fair_keys, tasks

c = tasks.c


class LateralFairRows(FairStatements):
    """fair_rows over ``unnest(keys, wants)``: each key's rows read by a LATERAL subquery
    along jobq_tasks_fair, locked with SKIP LOCKED, whatever the number of keys (the
    portable UNION ALL would be a statement per number of keys). set_fair_turns with
    ``fair_key = ANY(keys)``, each key's turn found by its position in the array: an index
    scan of the primary key (a join with ``unnest(keys, turns)`` was planned as a hash of a
    scan of every key of the queue: 4.6 ms against 0.9 at 10,000 keys)."""

    def set_fair_turns(self, conn: Connection, queue: str, turns: dict[str, float]) -> None:
        ordered = sorted(turns.items())
        params = {
            "f_queue": queue,
            "f_keys": [key for key, _ in ordered],
            "f_turn_values": [turn for _, turn in ordered],
        }
        self.run_prepared(conn, "fair set turns any", _set_turns_any, params)

    def fair_rows(
        self, conn: Connection, keys: Sequence[str], wants: Sequence[int], queue: str
    ) -> list[tuple[int, int]]:
        def build() -> sa.Select[Any]:
            chosen = (
                sa.func.unnest(
                    sa.bindparam("f_keys", type_=pg.ARRAY(sa.String)),
                    sa.bindparam("f_wants", type_=pg.ARRAY(sa.Integer)),
                )
                .table_valued("key", "want", with_ordinality="position")
                .render_derived("chosen")
            )
            rows = (
                sa.select(c.id)
                .where(self.capturable_of_key(chosen.c.key))
                .order_by(c.priority.desc(), c.run_at, c.id)
                .limit(chosen.c.want)
                .with_for_update(skip_locked=True)
                .lateral("key_rows")
            )
            return sa.select(chosen.c.position - 1, rows.c.id).join_from(chosen, rows, sa.true())

        params = {"f_queue": queue, "f_keys": list(keys), "f_wants": list(wants)}
        found: Sequence[Sequence[Any]] = self.run_prepared(
            conn, "fair rows lateral", build, params
        ).all()
        return [(row[0], row[1]) for row in found]


def _set_turns_any() -> sa.Update:
    """set_fair_turns' statement: the keys ``f_keys`` of ``f_queue`` by primary key, each
    taking the turn of ``f_turn_values`` at its position in ``f_keys``."""
    keys = sa.bindparam("f_keys", type_=pg.ARRAY(sa.String))
    turns = sa.bindparam("f_turn_values", type_=pg.ARRAY(sa.Float))
    # (array)[i]: a subscript of a cast parameter needs the parentheses.
    in_parentheses = sa.type_coerce(Grouping(turns), pg.ARRAY(sa.Float))
    k = fair_keys.c
    return (
        sa.update(fair_keys)
        .where(
            k.queue == sa.bindparam("f_queue", type_=sa.String),
            k.fair_key == sa.any_(keys),
        )
        .values(turn=in_parentheses[sa.func.array_position(keys, k.fair_key)])
    )
