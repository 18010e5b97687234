"""`jobq worker --metrics-port`: a real worker process's /metrics, scraped after a known
workload, on every database (tests/apps/metrics_app.py)."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import jobq
from tests.acceptance.test_worker_processes import wait_until
from tests.worker_processes import Workers

APP = "tests.apps.metrics_app:app"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint, by (name, sorted labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def reachable(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(APP, db_url, tmp_path)
    yield started
    started.kill_all()


def test_a_known_workload_counts_exactly(store: jobq.Store, workers: Workers) -> None:
    port = free_port()
    for n in range(5):
        store.enqueue("ok", {"n": n}, queue="fast")
    for _ in range(2):
        store.enqueue("boom", {}, retries=1)
    store.enqueue("nap_once", {})
    store.enqueue("overrun", {}, retries=0)
    cancelled = store.enqueue("until_cancelled", {})
    worker = workers.start("--metrics-port", str(port))
    wait_until(lambda: reachable(port))
    wait_until(lambda: store.get(cancelled).status is jobq.Status.IN_PROGRESS)  # type: ignore[union-attr]
    assert store.cancel(cancelled)

    def counted() -> bool:
        finished = sum(
            v for (name, _), v in scrape(port).items() if name == "jobq_runs_finished_total"
        )
        return finished >= 13

    wait_until(counted)
    samples = scrape(port)
    finished = {
        (labels["task"], labels["outcome"]): v
        for (name, pairs), v in samples.items()
        if name == "jobq_runs_finished_total"
        for labels in [dict(pairs)]
    }
    assert finished == {
        ("ok", "done"): 5, ("boom", "retried"): 2, ("boom", "failed"): 2,
        ("nap_once", "snoozed"): 1, ("nap_once", "done"): 1, ("overrun", "timed_out"): 1,
        ("until_cancelled", "cancelled"): 1,
    }  # fmt: skip
    assert value(samples, "jobq_runs_started_total", queue="fast", task="ok") == 5
    assert value(samples, "jobq_runs_started_total", queue="default", task="boom") == 4
    started = sum(v for (name, _), v in samples.items() if name == "jobq_runs_started_total")
    assert started == 13
    durations = [v for (name, _), v in samples.items() if name == "jobq_run_duration_seconds_count"]
    assert sum(durations) == 13
    assert value(samples, "jobq_run_duration_seconds_count", queue="fast", task="ok") == 5
    overrun = value(samples, "jobq_run_duration_seconds_sum", queue="default", task="overrun")
    assert overrun >= 0.6  # it ran on past its timeout until its code returned
    waits = value(samples, "jobq_queue_wait_seconds_count", queue="fast") + value(
        samples, "jobq_queue_wait_seconds_count", queue="default"
    )
    assert waits == 13
    assert value(samples, "jobq_worker_slots", state="busy") == 0
    assert value(samples, "jobq_worker_slots", state="free") == 8
    worker.process.terminate()
    assert worker.process.wait(timeout=60) == 0, worker.stderr()
    assert f"metrics at http://127.0.0.1:{port}/metrics" in worker.stderr()


def test_busy_slots_are_read_when_scraped(store: jobq.Store, workers: Workers) -> None:
    port = free_port()
    ids = [store.enqueue("until_cancelled", {}) for _ in range(3)]
    workers.start("--metrics-port", str(port), "--concurrency", "5")
    wait_until(lambda: reachable(port))
    wait_until(lambda: value(scrape(port), "jobq_worker_slots", state="busy") == 3)
    assert value(scrape(port), "jobq_worker_slots", state="free") == 2
    for task_id in ids:
        store.cancel(task_id)
    wait_until(lambda: value(scrape(port), "jobq_worker_slots", state="busy") == 0)


def test_a_port_in_use_is_a_clear_error(db_url: str, workers: Workers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = workers.start("--metrics-port", str(port))
        assert worker.process.wait(timeout=60) == 2
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1" in worker.stderr()


def test_without_the_extra_the_error_names_it(
    db_url: str, workers: Workers, tmp_path: Path
) -> None:
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed')\n")
    root = Path(__file__).resolve().parents[2]
    env = {"PYTHONPATH": f"{shadow.parent}:{root}"}
    worker = workers.start("--metrics-port", str(free_port()), env=env)
    assert worker.process.wait(timeout=60) != 0
    assert "--metrics-port needs the 'metrics' extra: pip install 'jobq[metrics]'" in (
        worker.stderr()
    )
