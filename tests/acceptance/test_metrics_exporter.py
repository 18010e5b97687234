"""`jobq metrics`: the whole database's task counts served to Prometheus, by a real
process and in-process (jobq/observe/exporter.py), on every database."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import jobq
from jobq import Cron, Schedule
from jobq.observe.exporter import DatabaseExporter
from tests.acceptance.test_worker_metrics import free_port, reachable, scrape, value
from tests.acceptance.test_worker_processes import wait_until
from tests.worker_processes import ROOT

STATUSES = [s.value for s in jobq.Status]
Counts = dict[tuple[str, str], float]
#: Samples by (name, sorted labels), as test_worker_metrics.scrape gives them.
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Exporter:
    process: subprocess.Popen[bytes]
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def exporters(db_url: str, tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    """Starts `jobq metrics` processes on ``db_url``; kills what is left at the end."""
    started: list[Exporter] = []

    def start(*options: str, path: Sequence[str] = ()) -> Exporter:
        """`jobq metrics OPTIONS`, with ``path`` ahead of the checkout on PYTHONPATH."""
        paths = [*path, str(ROOT), os.environ.get("PYTHONPATH", "")]
        environment = {**os.environ, "JOBQ_DATABASE_URL": db_url}
        environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        log = tmp_path / f"exporter-{len(started)}.log"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "jobq.cli", "metrics", *options],
                env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        started.append(Exporter(process, log))
        return started[-1]

    yield start
    for exporter in started:
        if exporter.process.poll() is None:
            exporter.process.kill()
            exporter.process.wait(timeout=30)


def known_rows(store: jobq.Store) -> Counts:
    """Tasks in every status over queues 'mail', 'reports' and 'later'; what each holds."""
    ids = {
        store.enqueue("t", {"n": n}, queue="mail", retries=r) for n, r in enumerate([0, 3, 3, 3])
    }
    captured = {t.id: t for t in store.capture(4, queues="mail", worker_id="w", lease=3600)}
    assert set(captured) == ids
    terminal, retried, done, _running = (captured[i] for i in sorted(ids))
    assert store.set_status(terminal.id, terminal.attempt, "failed", error="no")
    assert store.set_status(retried.id, retried.attempt, "failed", error="no", retry_delay=0)
    assert store.set_status(done.id, done.attempt, "done")
    assert store.cancel(store.enqueue("t", {}, queue="mail"))
    store.enqueue("t", {}, queue="mail", run_at=datetime.now(UTC) - timedelta(hours=1))
    store.enqueue("t", {}, queue="mail")
    for n in range(2):
        store.enqueue("t", {"n": n}, queue="reports")
    [report] = store.capture(1, queues="reports", worker_id="w")
    assert store.set_status(report.id, report.attempt, "done")
    store.enqueue("t", {}, queue="reports")
    store.enqueue("t", {}, queue="later", delay=3600)  # waiting, but not due
    # A schedule's row resting until its next tick is not a task: no count has it.
    store.sync_schedules([Schedule("yearly", Cron("0 0 1 1 *"), task="t", queue="mail")])
    return with_zeros(
        {
            ("mail", "queued"): 2, ("mail", "in_progress"): 1, ("mail", "done"): 1,
            ("mail", "failed"): 2, ("mail", "cancelled"): 1,
            ("reports", "queued"): 2, ("reports", "done"): 1, ("later", "queued"): 1,
        }
    )  # fmt: skip


def with_zeros(counts: Counts) -> Counts:
    """``counts`` with a 0 for every status a queue in it lacks, as the exporter says."""
    queues = {queue for queue, _ in counts}
    return {(q, s): counts.get((q, s), 0) for q in queues for s in STATUSES}


def task_counts(samples: Samples) -> Counts:
    """The jobq_tasks samples of a scrape, by (queue, status)."""
    return {
        (labels["queue"], labels["status"]): v
        for (name, pairs), v in samples.items()
        if name == "jobq_tasks"
        for labels in [dict(pairs)]
    }


def as_counted(store: jobq.Store) -> Counts:
    """What `jobq status` counts now, in the exporter's shape."""
    return with_zeros({(q, s.value): n for (q, s), n in store.counts().items()})


def test_a_known_set_of_rows_is_served_exactly(
    store: jobq.Store, exporters: Callable[..., Exporter]
) -> None:
    expected = known_rows(store)
    assert as_counted(store) == expected
    port = free_port()
    exporter = exporters("--port", str(port), "--interval", "0.2", "--finished-interval", "0.2")
    wait_until(lambda: reachable(port) or exporter.process.poll() is not None)
    assert exporter.process.poll() is None, exporter.stderr()
    wait_until(lambda: task_counts(scrape(port)) == expected)
    samples = scrape(port)
    assert value(samples, "jobq_oldest_waiting_seconds", queue="mail") >= 3600
    assert value(samples, "jobq_oldest_waiting_seconds", queue="mail") < 3600 + 300
    assert 0 <= value(samples, "jobq_oldest_waiting_seconds", queue="reports") < 300
    assert ("jobq_oldest_waiting_seconds", (("queue", "later"),)) in samples  # 0: none due
    assert value(samples, "jobq_oldest_waiting_seconds", queue="later") == 0
    assert value(samples, "jobq_exporter_up") == 1
    for part in ("active", "finished"):
        assert ("jobq_tasks_counted_seconds", (("part", part),)) in samples
        assert ("jobq_exporter_refresh_seconds", (("part", part),)) in samples

    # Later rows are counted by later refreshes: each part has its own.
    store.enqueue("t", {}, queue="reports")
    [report] = store.capture(1, queues="reports", worker_id="w")
    assert store.set_status(report.id, report.attempt, "cancelled")
    store.enqueue("t", {}, queue="new")
    changed = {
        **expected, ("reports", "cancelled"): 1, **with_zeros({("new", "queued"): 1})
    }  # fmt: skip
    wait_until(lambda: task_counts(scrape(port)) == changed)
    assert as_counted(store) == changed

    exporter.process.send_signal(signal.SIGTERM)
    assert exporter.process.wait(timeout=30) == 0, exporter.stderr()
    assert f"metrics at http://127.0.0.1:{port}/metrics" in exporter.stderr()


def test_counts_in_process_match_jobq_status_and_survive_a_failing_database(
    store: jobq.Store, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    expected = known_rows(store)
    exporter = DatabaseExporter(store, interval=0.05, finished_interval=0.05)
    assert parsed(exporter) == {("jobq_exporter_up", ()): 0}  # nothing counted yet
    exporter.start()
    try:
        wait_until(lambda: task_counts(parsed(exporter)) == expected)
        assert parsed(exporter)[("jobq_exporter_up", ())] == 1
        # The table goes away: the counts fail, and the last ones are served with up 0.
        with caplog.at_level(logging.INFO, logger="jobq.exporter"):
            rename(store, "jobq_tasks", "jobq_tasks_away")
            try:
                wait_until(lambda: parsed(exporter)[("jobq_exporter_up", ())] == 0)
                wait_until(lambda: len(failures(caplog)) == 2)  # one line for each part
                assert task_counts(parsed(exporter)) == expected
            finally:
                rename(store, "jobq_tasks_away", "jobq_tasks")
            wait_until(lambda: parsed(exporter)[("jobq_exporter_up", ())] == 1)
        assert len(failures(caplog)) == 2  # not one per retry
        assert db_url not in caplog.text
        assert "active counts refreshed again" in caplog.text
        store.enqueue("t", {}, queue="new")
        wait_until(lambda: task_counts(parsed(exporter)) == as_counted(store))
    finally:
        exporter.stop()


def parsed(exporter: DatabaseExporter) -> Samples:
    """Every sample the exporter would serve now, by (name, sorted labels)."""
    text = generate_latest(exporter.registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("could not count")]


def rename(store: jobq.Store, old: str, new: str) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {old} RENAME TO {new}"))


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_port_in_use_is_a_clear_error(exporters: Callable[..., Exporter]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        exporter = exporters("--port", str(port))
        assert exporter.process.wait(timeout=60) == 2
    assert f"--port {port}: cannot listen on 127.0.0.1" in exporter.stderr()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_without_the_extra_the_error_names_it(
    exporters: Callable[..., Exporter], tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    exporter = exporters("--port", str(free_port()), path=[str(shadow.parent)])
    assert exporter.process.wait(timeout=60) == 1
    assert "jobq metrics needs the 'metrics' extra: pip install 'jobq[metrics]'" in (
        exporter.stderr()
    )
