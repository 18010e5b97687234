"""postgres:// URLs, as many hosting platforms hand them out, are PostgreSQL with psycopg
wherever jobq takes a URL: Store(url), its listen URL, --database-url and
$JOBQ_DATABASE_URL. On the real server."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

import jobq
from tests.acceptance.test_cli import Cli
from tests.helpers import hears_its_enqueues


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
