"""SQLite's read of a fair queue's keys: each key with its first row, in one statement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from jobq.dialects.fair import FairStatements
from jobq.dialects.fair_deal import FairKey
from jobq.dialects.schema import tasks

c = tasks.c


class FirstRowFairKeys(FairStatements):
    """read_fair_keys with each key's first row, a correlated subquery along
    jobq_tasks_fair (nothing to lock: SQLite's write transaction holds the database): a
    capture of keys of weight 1 then reads no other rows (the UNION ALL of a subquery per
    key cost as much as the rest of the reads)."""

    def read_fair_keys(
        self, conn: Connection, lower: bool | None, upper: bool | None, params: dict[str, Any]
    ) -> list[FairKey]:
        def build() -> sa.Select[Any]:
            page = self.fair_keys_between(lower, upper).subquery("page")
            first = (
                sa.select(c.id)
                .where(self.capturable_of_key(page.c.fair_key))
                .order_by(c.priority.desc(), c.run_at, c.id)
                .limit(1)
                .scalar_subquery()
            )
            return sa.select(page.c.fair_key, page.c.weight, page.c.version, first).order_by(
                page.c.fair_key
            )

        key = ("fair keys with a row", lower, upper)
        found: Sequence[Sequence[Any]] = self.run_prepared(conn, key, build, params).all()
        weight = params["default_weight"]
        return [
            FairKey(name, w or weight, version, [] if id is None else [id], 1)
            for name, w, version, id in found
        ]
