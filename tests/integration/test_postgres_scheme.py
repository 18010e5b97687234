"""postgres:// URLs, as many hosting platforms hand them out, are PostgreSQL with psycopg
wherever jobq takes a URL, on the real server: Store(url), its listen URL, App(url) and
App() with $JOBQ_DATABASE_URL, a transaction pooler's URL, jobq.testing.isolated,
jobq.web.create_app(url), the commands' --database-url and $JOBQ_DATABASE_URL (enqueue,
show, migrate, worker, limits, doctor, dashboard --check, metrics), and Alembic's own
command line on jobq's migrations (alembic/env.py). Plain postgresql:// means psycopg too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
import jobq.testing
from jobq.web import create_app
from tests.acceptance.test_cli import Cli
from tests.acceptance.test_worker_metrics import free_port, reachable, scrape, value
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import defined
from tests.conftest import fresh_namespace_url
from tests.helpers import hears_its_enqueues
from tests.worker_processes import ROOT

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette asks for httpx2; httpx works the same here
    from starlette.testclient import TestClient


def as_postgres_scheme(url: str, driver: str = "") -> str:
    """``url`` written with the postgres:// scheme (postgres+DRIVER:// when given)."""
    scheme = f"postgres+{driver}" if driver else "postgres"
    return sa.make_url(url).set(drivername=scheme).render_as_string(hide_password=False)


@pytest.fixture
def postgres_db(postgres_url: str) -> str:
    """The session's PostgreSQL schema, migrated."""
    store = jobq.Store(postgres_url)
    store.migrate()
    store.dispose()
    return postgres_url


@pytest.mark.parametrize("driver", ["", "psycopg"])
def test_a_store_on_a_postgres_url_enqueues_and_reads(postgres_db: str, driver: str) -> None:
    store = jobq.Store(as_postgres_scheme(postgres_db, driver))
    try:
        assert store.dialect.name == "postgresql"
        assert store.engine.url.drivername == "postgresql+psycopg"
        task_id = store.enqueue("scheme", {"n": 1})
        task = store.get(task_id)
        assert task is not None and (task.name, task.args) == ("scheme", {"n": 1})
    finally:
        store.dispose()


def test_a_postgres_listen_url_hears_enqueues(postgres_db: str) -> None:
    store = jobq.Store(postgres_db, listen_url=as_postgres_scheme(postgres_db))
    try:
        assert hears_its_enqueues(store)
    finally:
        store.dispose()


def test_the_cli_takes_postgres_urls_as_option_and_from_the_environment(
    postgres_db: str, tmp_path: Path
) -> None:
    cli = Cli(tmp_path)
    url = as_postgres_scheme(postgres_db)
    given = cli(url, "enqueue", "a")
    assert given.returncode == 0, given.stderr
    task_id = int(given.stdout)
    shown = cli(None, "show", str(task_id), "--json", env={"JOBQ_DATABASE_URL": url})
    assert shown.returncode == 0, shown.stderr
    assert '"name": "a"' in shown.stdout


def with_scheme(url: str, scheme: str) -> str:
    """``url`` with the scheme ``scheme`` (postgres, postgres+psycopg, postgresql...)."""
    return sa.make_url(url).set(drivername=scheme).render_as_string(hide_password=False)


def test_plain_postgresql_urls_mean_psycopg(postgres_db: str) -> None:
    store = jobq.Store(with_scheme(postgres_db, "postgresql"))
    try:
        assert store.engine.url.drivername == "postgresql+psycopg"
        assert store.get(store.enqueue("plain", {})) is not None
    finally:
        store.dispose()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_an_app_on_a_postgres_url_has_its_task_run_by_a_worker_on_one(
    postgres_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    url = as_postgres_scheme(postgres_db)
    if how == "environment":
        monkeypatch.setenv("JOBQ_DATABASE_URL", url)
    app = jobq.App(url if how == "argument" else None)
    app.registry = defined.app.registry  # the worker process runs tests.apps.defined
    try:
        handle = app.enqueue("report", {"day": f"2026-12-0{len(how)}"})
        worker = Cli(tmp_path)(
            url, "worker", "--app", "tests.apps.defined:app", "--queues", "reports", "--burst"
        )
        assert worker.returncode == 0, worker.stderr
        assert handle.result(timeout=30) == f"report of 2026-12-0{len(how)}"
    finally:
        app.store.dispose()


def test_a_postgres_url_through_a_transaction_pooler(postgres_db: str) -> None:
    url = sa.make_url(as_postgres_scheme(postgres_db)).update_query_dict(
        {"jobq_pooler": "transaction"}
    )
    store = jobq.Store(url.render_as_string(hide_password=False))
    try:
        assert store.dialect.pooler == "transaction"
        task_id = store.enqueue("pooled", {"n": 1}, queue="pooled")
        [task] = store.capture(1, queues="pooled", worker_id="w")
        assert task.id == task_id
        assert store.set_status(task.id, task.attempt, jobq.Status.DONE, result=2)
        assert store.get(task_id).result == 2  # type: ignore[union-attr]
    finally:
        store.dispose()


def test_jobq_testing_isolates_an_app_on_a_postgres_url(postgres_db: str) -> None:
    app = jobq.App()
    with jobq.testing.isolated(app, as_postgres_scheme(postgres_db)) as store:
        assert store.engine.url.drivername == "postgresql+psycopg"
        assert app.store is store
        assert store.get(store.enqueue("isolated", {})) is not None


def test_the_dashboard_app_takes_a_postgres_url(postgres_db: str) -> None:
    seed = jobq.Store(postgres_db)
    seed.enqueue("shown.on.the.dashboard", {}, queue="dashboard-queue")
    seed.dispose()
    web = create_app(as_postgres_scheme(postgres_db))
    with TestClient(web) as client:
        page = client.get("/queues")
        assert page.status_code == 200, page.text
        assert "dashboard-queue" in page.text
    web.state.counts.stop()


def test_the_commands_take_postgres_urls(postgres_db: str, tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    url = as_postgres_scheme(postgres_db)
    migrated = cli(url, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    limited = cli(url, "limits", "set", "scheme-limited", "--concurrency", "2")
    assert limited.returncode == 0, limited.stderr
    store = jobq.Store(postgres_db)
    try:
        assert str(store.limits()["scheme-limited"]) == "concurrency 2"
        store.clear_limit("scheme-limited")
    finally:
        store.dispose()
    doctor = cli(url, "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "postgres://" in doctor.stdout and "checks OK" in doctor.stdout
    checked = cli(url, "dashboard", "--check")
    assert checked.returncode == 0, checked.stderr
    assert "the database is ready" in checked.stdout + checked.stderr


def test_the_metrics_exporter_takes_a_postgres_url(postgres_db: str, tmp_path: Path) -> None:
    seed = jobq.Store(postgres_db)
    seed.enqueue("counted", {}, queue="metrics-scheme")
    seed.dispose()
    port = free_port()
    environment = {**os.environ, "JOBQ_DATABASE_URL": as_postgres_scheme(postgres_db)}
    with (tmp_path / "exporter.log").open("wb") as log:
        exporter = subprocess.Popen(
            [sys.executable, "-m", "jobq.cli", "metrics", "--port", str(port),
             "--interval", "0.2"],
            env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    try:
        wait_until(lambda: reachable(port) or exporter.poll() is not None)
        assert exporter.poll() is None, (tmp_path / "exporter.log").read_text()
        wait_until(
            lambda: value(scrape(port), "jobq_tasks", queue="metrics-scheme", status="queued") == 1
        )
        assert value(scrape(port), "jobq_exporter_up") == 1
    finally:
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(timeout=30) == 0, (tmp_path / "exporter.log").read_text()


def test_alembics_own_command_line_migrates_a_postgres_url(tmp_path: Path) -> None:
    """`alembic upgrade head` on jobq's migrations, the URL from $JOBQ_DATABASE_URL."""
    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = {ROOT / 'alembic'}\n")
    with fresh_namespace_url("postgresql") as fresh:
        environment = {
            **os.environ, "JOBQ_DATABASE_URL": as_postgres_scheme(fresh),
            "PYTHONPATH": str(ROOT),
        }  # fmt: skip
        upgraded = subprocess.run(
            [sys.executable, "-m", "alembic", "-c", str(ini), "upgrade", "head"],
            env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert upgraded.returncode == 0, upgraded.stderr
        store = jobq.Store(fresh)
        try:
            store.check_schema()  # at this jobq's newest revision
        finally:
            store.dispose()
