"""tests/fresh_schema.py: a test's database is emptied only while it is exactly as
migrated; anything a test changed in the schema gets it a fresh migration."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

import jobq
from tests import fresh_schema
from tests.conftest import _drop_jobq_tables


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_an_emptied_database_counts_ids_from_one_and_a_changed_one_is_migrated_anew(
    db_url: str,
) -> None:
    store = jobq.Store(db_url)
    assert store.enqueue("t", {}) == 1
    store.dispose()
    fresh_schema.migrated(db_url, _drop_jobq_tables, fresh=False)  # emptied
    store = jobq.Store(db_url)
    assert store.enqueue("t", {}) == 1
    with store.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE jobq_tasks ADD COLUMN left_behind INTEGER"))
    store.dispose()
    fresh_schema.migrated(db_url, _drop_jobq_tables, fresh=False)  # migrated anew
    store = jobq.Store(db_url)
    with store.engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("jobq_tasks")}
        assert "left_behind" not in columns
        assert conn.execute(sa.text("SELECT count(*) FROM jobq_tasks")).scalar_one() == 0
    store.dispose()
