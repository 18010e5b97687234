"""The lease a capture gives each row it takes, as SQL (the worker's, or each task's own)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobq.dialects.schema import tasks

c = tasks.c


def lease_of(named_leases: int | None) -> sa.ColumnElement[Any]:
    """The lease seconds a capture gives each row.

    With ``named_leases`` None, parameter ``lease_seconds`` for every row (the worker's
    --lease). Otherwise the row's own lease, and for a row that set none, the lease of its
    task's definition: parameters ``lease_name_<i>``/``lease_value_<i>`` for the first
    ``named_leases`` names, ``lease_default`` for the rest (see jobq.db.tasks.Leases).
    """
    if named_leases is None:
        return sa.bindparam("lease_seconds", type_=sa.Float)
    default = sa.bindparam("lease_default", type_=sa.Float)
    by_name: sa.ColumnElement[Any] = default
    if named_leases:
        by_name = sa.case(
            *(
                (
                    c.name == sa.bindparam(f"lease_name_{i}", type_=sa.String),
                    sa.bindparam(f"lease_value_{i}", type_=sa.Float),
                )
                for i in range(named_leases)
            ),
            else_=default,
        )
    return sa.func.coalesce(c.lease, by_name, type_=sa.Float)
