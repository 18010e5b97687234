"""jobq through a real PgBouncer in transaction pooling mode (tests/pgbouncer_server.py).

With ``?jobq_pooler=transaction`` every part of jobq that keeps nothing in a session works
through the pooler, over server sessions that change from one transaction to the next:
capture, fenced ends, heartbeats, rescue, limits, row locks, cron rows. What needs a
session of its own (a session advisory lock, a migration's lock, LISTEN) is refused with
a clear error, or, for LISTEN, done on the --listen-url given. Without the parameter,
psycopg's prepared statements break as soon as a statement it prepared on one server
session runs on another: the control test shows that the parameter is what makes the
difference.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.db.errors import NeedsSession
from jobq.locks import AdvisoryLock, Lease, Mutex
from tests import pgbouncer_server
from tests.conftest import _drop_jobq_tables, missing
from tests.helpers import hears_its_enqueues

pytestmark = pytest.mark.slow

#: More runs of each statement than psycopg's prepare_threshold (5), over a pool of two
#: server sessions: without jobq_pooler, psycopg prepares what jobq runs.
ROUNDS = 30


@pytest.fixture(scope="module")
def bouncer() -> Iterator[pgbouncer_server.Bouncer]:
    server = os.environ.get("JOBQ_TEST_POSTGRES_URL")
    if not server:
        missing("postgresql")
    if shutil.which("pgbouncer") is None:
        missing("pgbouncer")
    with pgbouncer_server.running(server, pool_size=2) as started:
        yield started


@pytest.fixture
def pooled(bouncer: pgbouncer_server.Bouncer) -> Iterator[jobq.Store]:
    """A Store through the pooler on a freshly migrated database (migrated directly)."""
    _drop_jobq_tables(bouncer.direct_url)
    direct = jobq.Store(bouncer.direct_url)
    direct.migrate()
    direct.dispose()
    store = jobq.Store(bouncer.pooled_url)
    yield store
    store.dispose()


def in_two_threads(work: object) -> None:
    """Run ``work(k)`` in two threads at once (each its own connection); re-raise."""
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)  # type: ignore[operator]
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]


def test_a_worker_turn_and_its_chores_work_through_the_pooler(pooled: jobq.Store) -> None:
    """Two clients at once, 30 rounds each: enqueue, capture, heartbeat, set_status (done
    and failed-with-retry), rescue, limits, pause checks; every task ends once."""
    pooled.set_limit("limited", concurrency=1)

    def turns(k: int) -> None:
        worker = f"w{k}"
        for i in range(ROUNDS):
            pooled.enqueue("t", {"k": k, "i": i}, queue=f"q{k}")
            pooled.enqueue("l", {"k": k, "i": i}, queue="limited")
            (task,) = pooled.capture(1, worker_id=worker, queues=[f"q{k}"])
            assert pooled.heartbeat(worker, [task.fence]) == {task.id}
            assert pooled.set_status(task.id, task.attempt, Status.DONE, result={"i": i})
            for limited in pooled.capture(1, worker_id=worker, queues=["limited"]):
                assert pooled.set_status(limited.id, limited.attempt, Status.DONE)
            pooled.rescue()
            pooled.paused_queues()

    in_two_threads(turns)
    counts = pooled.counts()
    assert counts[("q0", Status.DONE)] == counts[("q1", Status.DONE)] == ROUNDS
    while left := pooled.capture(1, worker_id="w", queues=["limited"]):  # one at a time
        pooled.set_status(left[0].id, left[0].attempt, Status.DONE)
    assert pooled.counts()[("limited", Status.DONE)] == 2 * ROUNDS


def test_row_locks_and_transaction_advisory_locks_work_through_the_pooler(
    pooled: jobq.Store,
) -> None:
    def lock_rounds(k: int) -> None:
        for i in range(ROUNDS):
            mutex = Mutex(pooled, f"m{k}")
            assert mutex.acquire()
            mutex.release()
            lease = Lease(pooled, f"l{k}", ttl=5)
            assert lease.acquire()
            lease.release()
            advisory = AdvisoryLock(pooled, f"a{k}-{i}")  # held by its own transaction
            assert advisory.acquire()
            advisory.release()

    in_two_threads(lock_rounds)


def test_what_needs_a_session_is_refused_clearly(pooled: jobq.Store) -> None:
    with pytest.raises(NeedsSession, match=r"AdvisoryLock\(session=True\).*jobq_pooler"):
        AdvisoryLock(pooled, "s", session=True)
    with pytest.raises(NeedsSession, match="run `jobq migrate` with the server's own URL"):
        pooled.migrate()
    assert pooled.listen(lambda queues: None, threading.Event()) is False


def test_listen_goes_to_the_listen_url(
    bouncer: pgbouncer_server.Bouncer, pooled: jobq.Store
) -> None:
    """Given the server's own URL to listen on, a pooled Store hears enqueues there."""
    store = jobq.Store(bouncer.pooled_url, listen_url=bouncer.direct_url)
    try:
        assert hears_its_enqueues(store)
    finally:
        store.dispose()


def test_without_jobq_pooler_psycopg_prepared_statements_break(
    bouncer: pgbouncer_server.Bouncer, pooled: jobq.Store
) -> None:
    """The control: the same work through the same PgBouncer, by a client that does not
    say it is pooled, fails once a statement it prepared on one server session runs on
    another. Two held transactions steer it there whatever the machine's load: the first
    keeps one of the pool's two server sessions while the client prepares its statements
    on the other; the second takes that one, the first lets its own go, and the client's
    next turn lands on the session that never saw them."""
    plain = jobq.Store(bouncer.plain_url)

    def turn(i: int) -> None:
        plain.enqueue("t", {"i": i}, queue="q")
        for task in plain.capture(1, worker_id="w", queues=["q"]):
            plain.set_status(task.id, task.attempt, Status.DONE)

    try:
        with bouncer.connect() as first, bouncer.connect() as second:
            first.execute("SELECT 1")  # opens a transaction: holds one server session
            for i in range(ROUNDS):
                turn(i)  # on the other server session, prepared there after 5 runs
            second.execute("SELECT 1")  # takes that session, the only free one
            first.commit()
            with pytest.raises((sa.exc.DBAPIError, jobq.JobqError), match="prepared statement"):
                turn(ROUNDS)
            second.commit()
    finally:
        plain.dispose()
