"""The elected worker's vacuum of jobq_tasks (jobq.upkeep.vacuum), on real databases: on
PostgreSQL a real VACUUM once dead rows pile up, on a thread of its own; nothing where
the database keeps no dead rows, where the role may not vacuum, or with vacuum off."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.errors import JobqError
from jobq.db.tasks import Completion
from jobq.dialects.vacuum import DeadRows
from jobq.upkeep import vacuum
from jobq.upkeep.vacuum import Vacuum
from tests.helpers import until

TASKS = 1_500
#: Seconds the statistics may take to count a session's rows (an idle one flushes in 10 s).
STATS_LAG = 30.0


def failed(what: str, error: JobqError) -> None:
    raise AssertionError(f"{what} failed: {error}")


def dead_rows(store: jobq.Store) -> DeadRows | None:
    with store.db.unit() as conn:
        return store.dialect.dead_rows(conn)


def vacuum_count(store: jobq.Store) -> int:
    with store.db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text(
                    "SELECT vacuum_count FROM pg_stat_user_tables "
                    "WHERE relid = to_regclass('jobq_tasks')"
                )
            ).scalar_one()
        )


def leave_dead_rows(store: jobq.Store) -> None:
    """TASKS tasks enqueued, captured and ended: two dead rows each."""
    store.enqueue_many("work", [{"n": n} for n in range(TASKS)])
    runs = store.capture(TASKS, worker_id="test")
    store.set_statuses([Completion(t.id, t.attempt, Status.DONE) for t in runs])


@pytest.fixture
def low_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Vacuum past 1,000 dead rows rather than 100,000."""
    monkeypatch.setattr(vacuum, "DEAD_ROWS", 1_000)


@pytest.mark.usefixtures("low_threshold")
def test_piled_up_dead_rows_are_vacuumed_on_a_thread_of_its_own(store: jobq.Store) -> None:
    stats: Counter[str] = Counter()
    chore = Vacuum(store, failed, stats)
    leave_dead_rows(store)
    if store.dialect.name != "postgresql":
        # InnoDB purges old row versions itself, SQLite keeps none: nothing to read or do.
        assert dead_rows(store) is None
        chore.step(time.monotonic())
        assert not chore.running and stats["vacuumed"] == 0
        return
    before = vacuum_count(store)
    rows = until(lambda: (r := dead_rows(store)) is not None and vacuum.due(r) and r, STATS_LAG)
    assert rows.dead >= 1_000 and rows.may_vacuum
    chore.step(time.monotonic())
    until(lambda: not chore.running)
    assert stats["vacuumed"] == 1
    until(lambda: vacuum_count(store) > before, STATS_LAG)
    # Read again within CHECK_EVERY: no second look, no second vacuum.
    chore.step(time.monotonic())
    assert not chore.running and stats["vacuumed"] == 1


@pytest.mark.usefixtures("low_threshold")
def test_with_vacuum_off_the_table_is_left_to_autovacuum(store: jobq.Store) -> None:
    stats: Counter[str] = Counter()
    chore = Vacuum(store, failed, stats, enabled=False)
    leave_dead_rows(store)
    if store.dialect.name == "postgresql":
        until(lambda: (r := dead_rows(store)) is not None and vacuum.due(r), STATS_LAG)
    chore.step(time.monotonic())
    assert not chore.running and stats["vacuumed"] == 0


@pytest.fixture
def tenant_store(store: jobq.Store) -> Iterator[jobq.Store]:
    """A Store on the same tables as a role that may read and write them, not own them."""
    if store.dialect.name != "postgresql":
        pytest.skip("roles that own tables: PostgreSQL's vacuum only")
    role = f"jobq_tenant_{uuid.uuid4().hex[:8]}"
    with store.db.engine.connect() as conn:
        schema = conn.execute(sa.text("SELECT current_schema()")).scalar_one()
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
        conn.exec_driver_sql(f'GRANT USAGE ON SCHEMA "{schema}" TO {role}')
        conn.exec_driver_sql(
            f'GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA "{schema}" TO {role}'
        )
        conn.exec_driver_sql(f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{schema}" TO {role}')
        conn.commit()
    tenant = jobq.Store(store.db.engine.url.set(username=role, password=None))
    try:
        yield tenant
    finally:
        tenant.dispose()
        with store.db.engine.connect() as conn:
            conn.exec_driver_sql(f"DROP OWNED BY {role}")
            conn.exec_driver_sql(f"DROP ROLE {role}")
            conn.commit()


def test_a_role_that_does_not_own_the_table_says_so_once_and_leaves_it_to_autovacuum(
    store: jobq.Store,
    tenant_store: jobq.Store,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(vacuum, "DEAD_ROWS", 0)
    monkeypatch.setattr(vacuum, "CHECK_EVERY", 0.0)
    stats: Counter[str] = Counter()
    chore = Vacuum(tenant_store, failed, stats)
    leave_dead_rows(store)
    rows = until(
        lambda: (r := dead_rows(tenant_store)) is not None and vacuum.due(r) and r, STATS_LAG
    )
    assert not rows.may_vacuum
    with caplog.at_level(logging.INFO, logger="jobq.worker"):
        for _ in range(3):
            chore.step(time.monotonic())
            assert not chore.running
    assert stats["vacuumed"] == 0
    said = [r.getMessage() for r in caplog.records if "may not vacuum" in r.getMessage()]
    assert len(said) == 1 and "does not own it" in said[0]


@pytest.mark.usefixtures("low_threshold")
def test_the_next_vacuum_waits_for_the_last_to_be_a_duty_share_of_the_time(
    store: jobq.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's vacuum only")
    monkeypatch.setattr(vacuum, "CHECK_EVERY", 0.0)
    monkeypatch.setattr(vacuum, "DUTY", 0.001)  # rest 999 times as long as a vacuum took
    stats: Counter[str] = Counter()
    chore = Vacuum(store, failed, stats)
    for round in range(2):
        leave_dead_rows(store)
        until(lambda: (r := dead_rows(store)) is not None and vacuum.due(r), STATS_LAG)
        chore.step(time.monotonic() + 10_000 * round)  # past the first one's rest
        until(lambda: not chore.running)
        assert stats["vacuumed"] == round + 1
        # Due again at once, yet resting: the vacuum that just ended took 1/1000 of it.
        chore.step(time.monotonic())
        assert not chore.running and stats["vacuumed"] == round + 1
