"""PostgreSQL's read of a fair queue's keys' rows: one LATERAL join, one statement shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import Connection

from jobq.dialects.fair import FairStatements
from jobq.dialects.schema import FAIR_INDEX, fair_keys, tasks

c = tasks.c


class LateralFairRows(FairStatements):
    """fair_rows over ``unnest(keys, wants)``: each key's rows read by a LATERAL subquery
    along jobq_tasks_fair, locked with SKIP LOCKED, whatever the number of keys (the
    portable UNION ALL would be a statement per number of keys). set_fair_turns over
    ``unnest(keys, turns)``: a few rows the planner looks up by primary key (the JSON
    records' estimate of a hundred made it hash a scan of every key of the queue)."""

    def set_fair_turns(self) -> sa.Update:
        def build() -> sa.Update:
            new = (
                sa.func.unnest(
                    sa.bindparam("f_keys", type_=pg.ARRAY(sa.String)),
                    sa.bindparam("f_turn_values", type_=pg.ARRAY(sa.Float)),
                )
                .table_valued("fair_key", "turn")
                .render_derived("new")
            )
            k = fair_keys.c
            return (
                sa.update(fair_keys)
                .where(
                    k.queue == sa.bindparam("f_queue", type_=sa.String),
                    k.fair_key == new.c.fair_key,
                )
                .values(turn=new.c.turn)
            )

        return self.memo("fair set turns unnest", build)

    def fair_turn_params(self, turns: dict[str, float]) -> dict[str, Any]:
        ordered = sorted(turns.items())
        return {
            "f_keys": [key for key, _ in ordered],
            "f_turn_values": [turn for _, turn in ordered],
        }

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
                .where(
                    self.within(FAIR_INDEX),
                    c.queue_id == sa.bindparam("f_queue", type_=sa.String),
                    c.fair_key == chosen.c.key,
                    c.fair_key.is_not(None),
                    self.capturable_waiting(self.now()),
                )
                .order_by(c.priority.desc(), c.run_at, c.id)
                .limit(chosen.c.want)
                .with_for_update(skip_locked=True)
                .lateral("key_rows")
            )
            return sa.select(chosen.c.position - 1, rows.c.id).join_from(chosen, rows, sa.true())

        stmt = self.memo("fair rows lateral", build)
        params = {"f_queue": queue, "f_keys": list(keys), "f_wants": list(wants)}
        return [(position, id) for position, id in conn.execute(stmt, params)]
