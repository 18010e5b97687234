"""100 idle workers through PgBouncer (transaction pooling, 10 server connections) hold
no more server connections than its pool, and drain a burst of 20,000 tasks exactly once.

Ten `jobq worker --processes 10` groups on the pooled URL, polling (no --listen-url: 100
LISTEN sessions would take the server's connections the pooler exists to save). Each
run appends a line to a file (tests/apps/burst.py), so runs are counted without a
session of the tasks' own.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from jobq.dialects.schema import tasks
from tests import pgbouncer_server
from tests.acceptance.test_hostile_tasks import alive_until, stop_all
from tests.apps.burst import tick
from tests.conftest import missing
from tests.worker_processes import Workers

pytestmark = [pytest.mark.slow, pytest.mark.serial]

GROUPS = 10
PROCESSES = 10
POOL = 10
BURST = 20_000


@pytest.fixture
def bouncer() -> Iterator[pgbouncer_server.Bouncer]:
    server = os.environ.get("JOBQ_TEST_POSTGRES_URL")
    if not server:
        missing("postgresql")
    with pgbouncer_server.running(server, pool_size=POOL) as started:
        store = jobq.Store(started.direct_url)
        store.migrate()
        store.dispose()
        yield started


class Sampler:
    """PgBouncer's server connections, sampled every 0.2 s in a thread until stopped."""

    def __init__(self, bouncer: pgbouncer_server.Bouncer) -> None:
        self.bouncer = bouncer
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.samples.append(self.bouncer.server_connections())

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.samples


def test_a_hundred_workers_through_pgbouncer_drain_a_burst_exactly_once(
    bouncer: pgbouncer_server.Bouncer, tmp_path: Path
) -> None:
    run_file = tmp_path / "runs"
    workers = Workers(
        "tests.apps.burst:app", bouncer.pooled_url, tmp_path,
        ["--poll-interval", "0.5", "--processes", str(PROCESSES), "--concurrency", "4"],
    )  # fmt: skip
    env = {"JOBQ_TEST_RUN_FILE": str(run_file), "JOBQ_LISTEN_URL": None}
    groups = [workers.start(env=env) for _ in range(GROUPS)]
    store = jobq.Store(bouncer.pooled_url)
    sampler = Sampler(bouncer)
    try:
        alive_until(
            groups[0],
            lambda: sum(w.alive for w in store.live_workers()) == GROUPS * PROCESSES,
            timeout=180,
        )
        store.enqueue_many(tick.name, [{"n": n} for n in range(BURST)])

        def drained() -> bool:
            with store.engine.connect() as conn:
                done = conn.execute(
                    sa.select(sa.func.count()).where(tasks.c.status == "done")
                ).scalar_one()
            return done == BURST

        alive_until(groups[0], drained, timeout=300)
        samples = sampler.stop()
        runs = Counter()
        attempts = Counter()
        for line in run_file.read_text().splitlines():
            task_id, attempt, _pid = line.split()
            runs[int(task_id)] += 1
            attempts[int(attempt)] += 1
        assert len(runs) == BURST
        assert set(runs.values()) == {1}, [t for t, n in runs.items() if n > 1][:10]
        assert attempts == {1: BURST}
        assert max(samples) <= POOL, samples
    finally:
        sampler.stop()
        store.dispose()
        stop_all(groups, timeout=60)  # one after the other took 17 s of 74
        workers.kill_all()
