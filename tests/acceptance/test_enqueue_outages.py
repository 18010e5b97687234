"""Enqueues wait out a short outage of PostgreSQL (a private server, stopped and restarted
for real), and never write a task twice.

- An enqueue made while the server is down waits (``enqueue_wait``), then succeeds once
  it is back: exactly one row. Past the wait it raises DatabaseUnavailable naming the host
  and how long it waited, having written nothing; with ``enqueue_wait=0`` at once.
- After a restart, the connections the Store kept are found dead before anything is sent
  on them, and replaced: no error, even with ``enqueue_wait=0``.
- A burst of enqueue_many calls from several threads across a restart: every call either
  returned (its rows exist exactly once) or raised; no row is there twice.
- enqueue_async waits without blocking the event loop.
- A session ended while its INSERT runs (pg_terminate_backend, the INSERT waiting on a
  table lock) is not tried again: the error says the enqueue may or may not have been
  written. A workflow's transaction lost before its COMMIT is tried again, whole.

How many connections the Store tried to open (refused ones too) is counted by the
engine's ``do_connect`` event: the tests wait on that, never on the clock.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks, workflows
from tests import postgres_server
from tests.acceptance.test_worker_processes import wait_until

pytestmark = pytest.mark.slow

#: A private PostgreSQL server for the module (a fixture).
server = postgres_server.private_server

#: A wait far longer than any restart here takes: a test of success never runs out of it.
LONG = 60.0


@pytest.fixture
def migrated(server: postgres_server.PostgresServer) -> postgres_server.PostgresServer:
    jobq.Store(server.url).migrate()
    return server


@contextmanager
def store_on(url: str, **options: Any) -> Iterator[jobq.Store]:
    store = jobq.Store(url, **options)
    try:
        yield store
    finally:
        store.dispose()


class Attempts:
    """The connections ``store`` tries to open from now on (the engine's ``do_connect``
    event, which opens them itself): how many, and how many were refused."""

    def __init__(self, store: jobq.Store) -> None:
        self.tried = 0
        self.refused = 0
        sa.event.listen(store.engine, "do_connect", self._connect)

    def _connect(self, dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        self.tried += 1
        try:
            return dialect.connect(*cargs, **cparams)
        except Exception:
            self.refused += 1
            raise

    def __call__(self) -> int:
        return self.tried


def rows_named(url: str, *names: str) -> dict[str, int]:
    """How many task rows have each of ``names``, read on a connection of its own."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            stmt = sa.select(tasks.c.name, sa.func.count()).where(tasks.c.name.in_(names))
            found = dict(conn.execute(stmt.group_by(tasks.c.name)).all())
    finally:
        engine.dispose()
    return {name: int(found.get(name, 0)) for name in names}


def fill_pool(store: jobq.Store) -> None:
    """Leave idle connections in ``store``'s pool: a restart ends them all."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda n: store.enqueue("warm", {"n": n}), range(16)))
    assert store.engine.pool.checkedin() > 0  # type: ignore[attr-defined]


@contextmanager
def stopped(server: postgres_server.PostgresServer) -> Iterator[None]:
    """The server down for the block (however it ends), up again after."""
    server.stop()
    try:
        yield
    finally:
        server.start()


def name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_an_enqueue_during_a_restart_succeeds_once_the_server_is_back(
    migrated: postgres_server.PostgresServer,
) -> None:
    with store_on(migrated.url, enqueue_wait=LONG) as store, ThreadPoolExecutor(1) as pool:
        fill_pool(store)
        task = name()
        with stopped(migrated):
            tried = Attempts(store)
            pending = pool.submit(store.enqueue, task, {"n": 1})
            wait_until(lambda: tried() >= 3)  # refused, then tried again, and again
            assert not pending.done()
        task_id = pending.result(timeout=LONG)
        assert store.get(task_id).name == task
        assert rows_named(migrated.url, task) == {task: 1}


@pytest.mark.parametrize("how", ["enqueue", "enqueue_many", "workflow"])
def test_a_restart_longer_than_the_wait_raises_after_the_wait(
    migrated: postgres_server.PostgresServer, how: str
) -> None:
    wait = 1.5
    app = jobq.App(migrated.url, enqueue_wait=wait)
    task = name()
    step = app.task(name=task)(lambda: None)
    calls: dict[str, Callable[[], Any]] = {
        "enqueue": lambda: step.enqueue(),
        "enqueue_many": lambda: step.enqueue_many([{}, {}]),
        "workflow": lambda: jobq.chain(step.s(), step.s()).enqueue(),
    }
    try:
        fill_pool(app.store)
        with stopped(migrated):
            tried = Attempts(app.store)
            began = time.monotonic()
            with pytest.raises(jobq.DatabaseUnavailable) as raised:
                calls[how]()
            waited = time.monotonic() - began
            assert tried() >= 2
        assert waited >= wait  # no earlier than the deadline...
        assert waited < wait + 30  # ...and not without end
        message = str(raised.value)
        assert f"127.0.0.1:{migrated.port}" in message and "'postgres'" in message
        assert re.search(r" \(waited \d+\.\d s; nothing was written\)$", message), message
        assert raised.value.nothing_written
        assert rows_named(migrated.url, task) == {task: 0}
    finally:
        app.store.dispose()


def test_enqueue_wait_0_refuses_at_once(migrated: postgres_server.PostgresServer) -> None:
    with store_on(migrated.url, enqueue_wait=0) as store, stopped(migrated):
        tried = Attempts(store)
        with pytest.raises(jobq.DatabaseUnavailable, match=f"127.0.0.1:{migrated.port}"):
            store.enqueue(name(), {})
        assert tried() == 1  # one refusal, not tried again
        assert "waited" not in str(_last_error(lambda: store.enqueue(name(), {})))


def _last_error(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except jobq.DatabaseUnavailable as error:
        return error
    raise AssertionError("it did not raise")


@pytest.mark.parametrize("wait", [0.0, LONG])
def test_connections_a_restart_ended_are_replaced_before_anything_is_sent(
    migrated: postgres_server.PostgresServer, wait: float
) -> None:
    """Every pooled connection is dead after the restart; each kind of enqueue finds so
    before it sends its statement, and takes a new one: no error, even with no wait."""
    with store_on(migrated.url, enqueue_wait=wait) as store:
        kinds: list[tuple[Callable[[str], Any], int]] = [
            (lambda task: store.enqueue(task, {}), 1),  # Database.run's own statement
            (lambda task: store.enqueue_many(task, [{}, {}]), 2),
            (lambda task: store.enqueue(task, {}, unique_key=task), 1),  # a Connection's
            (lambda task: store.enqueue_many(task, [{}] * 6_000), 6_000),  # a transaction
        ]
        for enqueue, rows in kinds:
            fill_pool(store)
            migrated.restart()
            task = name()
            enqueue(task)
            assert rows_named(migrated.url, task) == {task: rows}


def test_a_burst_across_a_restart_writes_each_call_once_or_not_at_all(
    migrated: postgres_server.PostgresServer,
) -> None:
    threads, rows = 6, 10
    done: list[str] = []  # names of the calls that returned
    failed: list[tuple[str, jobq.DatabaseUnavailable]] = []
    stop = threading.Event()

    def producer(index: int, store: jobq.Store) -> None:
        for call in range(1_000_000):
            if stop.is_set():
                return
            task = f"burst-{index}-{call}"
            try:
                ids = store.enqueue_many(task, [{"row": n} for n in range(rows)])
            except jobq.DatabaseUnavailable as error:
                failed.append((task, error))
            else:
                assert len(set(ids)) == rows
                done.append(task)

    with store_on(migrated.url, enqueue_wait=LONG) as store:
        attempts = Attempts(store)
        with ThreadPoolExecutor(threads) as pool:
            running = [pool.submit(producer, i, store) for i in range(threads)]
            wait_until(lambda: len(done) >= 50)
            migrated.restart()
            after = len(done)
            wait_until(lambda: len(done) >= after + 50)
            stop.set()
            for future in running:
                future.result(timeout=LONG)
    names = done + [task for task, _ in failed]
    found = rows_named(migrated.url, *names)
    assert {task: found[task] for task in done} == dict.fromkeys(done, rows)
    for task, error in failed:
        # Lost in flight (the restart ended the statement's session): never tried again,
        # so its rows are there once or not at all, and it says so.
        assert not error.nothing_written, error
        assert "may or may not have been written" in str(error)
        assert found[task] in (0, rows)
    assert len(done) >= 100
    assert attempts.refused > 0  # calls came while it was down, and waited


def test_enqueue_async_does_not_block_the_loop_while_it_waits(
    migrated: postgres_server.PostgresServer,
) -> None:
    app = jobq.App(migrated.url, enqueue_wait=LONG)
    task = name()
    step = app.task(name=task)(lambda: None)

    async def scenario() -> int:
        tried = Attempts(app.store)
        ticks = 0
        pending = asyncio.ensure_future(step.enqueue_async())
        while tried() < 3 or ticks < 20:  # the enqueue is refused again and again...
            await asyncio.sleep(0.01)
            ticks += 1  # ...and the loop runs on meanwhile
            assert not pending.done()
        await asyncio.to_thread(migrated.start)
        return int(await pending)

    try:
        fill_pool(app.store)
        migrated.stop()
        try:
            task_id = asyncio.run(scenario())
        finally:
            if not _up(migrated):
                migrated.start()
        assert app.store.get(task_id).name == task
        assert rows_named(migrated.url, task) == {task: 1}
    finally:
        app.store.dispose()


def _up(server: postgres_server.PostgresServer) -> bool:
    try:
        server.wait_until_ready(timeout=0)
    except Exception:
        return False
    return True


@contextmanager
def tasks_table_locked(url: str) -> Iterator[None]:
    """The tasks table locked against INSERTs by another session, for the block."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("LOCK TABLE jobq_tasks IN SHARE ROW EXCLUSIVE MODE")
            yield
            conn.rollback()
    finally:
        engine.dispose()


def waiting_inserts(url: str) -> list[int]:
    """Backend pids of the sessions whose statement waits on a lock of jobq_tasks."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            pids = conn.exec_driver_sql(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'INSERT INTO jobq_tasks%%'"
            ).scalars()
            return [int(pid) for pid in pids]
    finally:
        engine.dispose()


def terminate(url: str, pids: list[int]) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            for pid in pids:  # waits (up to 10 s) until it has ended
                conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)}, 10000)")
    finally:
        engine.dispose()


def test_a_session_ended_mid_insert_is_not_tried_again_and_says_so(
    migrated: postgres_server.PostgresServer,
) -> None:
    url = migrated.url
    task = name()
    with store_on(url, enqueue_wait=LONG) as store, ThreadPoolExecutor(1) as pool:
        fill_pool(store)
        with tasks_table_locked(url):
            pending = pool.submit(store.enqueue, task, {})
            wait_until(lambda: bool(waiting_inserts(url)))
            [pid] = waiting_inserts(url)
            terminate(url, [pid])
            # Raised while the lock is still held: not sent again (it would wait on it).
            error = pending.exception(timeout=LONG)
        assert isinstance(error, jobq.DatabaseUnavailable)
        assert not error.nothing_written
        message = str(error)
        assert "while the enqueue was in flight: it may or may not have been written" in message
        assert f"127.0.0.1:{migrated.port}" in message
        assert rows_named(url, task) == {task: 0}  # the server rolled it back


def test_a_workflow_lost_before_its_commit_is_written_again_whole(
    migrated: postgres_server.PostgresServer,
) -> None:
    """Its transaction's session ends while an INSERT of its nodes waits: nothing was
    committed, so it is tried again, and then written once, edges and all."""
    url = migrated.url
    app = jobq.App(url, enqueue_wait=LONG)
    task = name()
    step = app.task(name=task)(lambda: None)
    try:
        fill_pool(app.store)
        with ThreadPoolExecutor(1) as pool:
            with tasks_table_locked(url):
                pending = pool.submit(jobq.chain(step.s(), step.s(), step.s()).enqueue)
                wait_until(lambda: bool(waiting_inserts(url)))
                [first] = waiting_inserts(url)
                terminate(url, [first])
                # Tried again: its new session waits on the lock in turn.
                wait_until(lambda: bool(set(waiting_inserts(url)) - {first}))
                assert not pending.done()
            handle = pending.result(timeout=LONG)
        assert rows_named(url, task) == {task: 3}
        assert len(app.store.workflow_edges(handle.id)) == 2
        engine = sa.create_engine(url)
        with engine.connect() as conn:  # the first try's jobq_workflows row rolled back
            assert conn.execute(sa.select(sa.func.count()).select_from(workflows)).scalar() == (
                conn.execute(sa.select(sa.func.count(sa.distinct(tasks.c.workflow_id)))).scalar()
            )
        engine.dispose()
    finally:
        app.store.dispose()
