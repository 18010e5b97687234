"""MySQL's single-table UPDATE assigns left to right: an order of its SET clause that
reads as one simultaneous assignment (capture's take, and lock takeovers)."""

from __future__ import annotations

import graphlib
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql import visitors


def ordered_update(update: sa.Update, values: dict[str, Any]) -> sa.Update:
    """``update`` SETting ``values`` in an order that MySQL's left-to-right assignment
    evaluates as one simultaneous assignment: each column is set only after every
    expression that reads it."""
    table = update.table
    assigned = {name: table.c[name] for name in values}
    graph: dict[str, set[str]] = {name: set() for name in values}
    for name, value in values.items():
        if not isinstance(value, sa.ClauseElement):
            continue
        for read in visitors.iterate(value):
            other = getattr(read, "name", None)
            if other != name and other in assigned and read is assigned[other]:
                graph[other].add(name)  # ``other`` is set after ``name`` reads it
    order = list(graphlib.TopologicalSorter(graph).static_order())  # CycleError: unorderable
    return update.ordered_values(*[(table.c[name], values[name]) for name in order])
