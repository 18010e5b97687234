"""PostgreSQL's read of a fair queue's keys' rows: one LATERAL join, one statement shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.engine import Connection

from jobq.db.prepared import Prepared
from jobq.dialects.fair import FairStatements
from jobq.dialects.fair_deal import FairKey
from jobq.dialects.schema import tasks

c = tasks.c


class LateralFairRows(FairStatements):
    """fair_rows over ``unnest(keys, wants)``: each key's rows read by a LATERAL subquery
    along jobq_tasks_fair, locked with SKIP LOCKED, whatever the number of keys (the
    portable UNION ALL would be a statement per number of keys). capture_ids with the ids as
    one array: psycopg parses a statement of more than 50 parameters anew at each run
    (an IN list of 128 cost 0.4 ms a capture), one of a few it keeps parsed."""

    def read_fair_keys(
        self, conn: Connection, lower: bool | None, upper: bool | None, params: dict[str, Any]
    ) -> list[FairKey]:
        """The keys with their first rows, up to each key's weight (the rows of its first
        visit), read LATERAL and locked in the same statement: the rows statement after it
        is then needed only for keys whose visits take more."""

        def build() -> sa.Select[Any]:
            page = self.fair_keys_between(lower, upper).subquery("page")
            weight = sa.func.coalesce(
                page.c.weight, sa.bindparam("default_weight", type_=sa.Integer)
            )
            first = (
                sa.select(c.id, c.priority, c.run_at)
                .where(self.capturable_of_key(page.c.fair_key))
                .order_by(c.priority.desc(), c.run_at, c.id)
                .limit(weight)
                .with_for_update(skip_locked=True)
                .lateral("first_rows")
            )
            return (
                sa.select(weight, page.c.fair_key, page.c.version, first.c.id)
                .select_from(page.outerjoin(first, sa.true()))
                .order_by(page.c.fair_key, first.c.priority.desc(), first.c.run_at, first.c.id)
            )

        keys: list[FairKey] = []
        key = ("fair keys with rows", lower, upper)
        found: Sequence[Sequence[Any]] = self.run_prepared(conn, key, build, params).all()
        for weight, name, version, id in found:
            if not keys or keys[-1].name != name:
                keys.append(FairKey(name, weight, version, [], weight))
            if id is not None:
                keys[-1].first_rows.append(id)  # type: ignore[union-attr]
        return keys

    def capture_ids(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
    ) -> Sequence[Sequence[Any]]:
        return self._capture_any(conn, ids, named_leases, params, moving=False)

    def capture_ids_moving(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
        queue: str,
        cursor: tuple[str, int],
    ) -> Sequence[Sequence[Any]]:
        """The cursor written by the capture's statement (a data-modifying WITH): one round
        trip less."""
        values = {**params, "f_queue": queue, "cursor": cursor[0], "taken": cursor[1]}
        return self._capture_any(conn, ids, named_leases, values, moving=True)

    def _capture_any(
        self,
        conn: Connection,
        ids: Sequence[int],
        named_leases: int | None,
        params: dict[str, Any],
        moving: bool,
    ) -> Sequence[Sequence[Any]]:
        def build() -> Prepared:
            stmt = (
                sa.update(tasks)
                .where(c.id == sa.any_(sa.bindparam("picked", type_=pg.ARRAY(sa.BigInteger))))
                .values(**self.fair_capture_values(named_leases))
                .returning(*tasks.c)
            )
            if moving:
                stmt = stmt.add_cte(self.set_fair_cursor().cte("moved"))
            return Prepared(stmt, conn.dialect)

        prepared = self.memo(("fair capture ids any", named_leases, moving), build)
        values = prepared.parameters({**params, "picked": list(ids)})
        return conn.exec_driver_sql(prepared.sql, values).fetchall()

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
