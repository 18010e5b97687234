"""The dashboard's pages after the server ended its pooled sessions (pg_terminate_backend,
MariaDB's KILL, as a restart does): each page answers normally, never with the
"cannot reach the database" page, its stale connections replaced."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

import jobq
from tests.acceptance.test_cli_outage import held_sessions
from tests.integration.test_database_errors import end_sessions
from tests.web.conftest import WORKER, Rows

pytestmark = pytest.mark.parametrize("backend", ["postgresql", "mysql"])

ROUNDS = 3


def test_pages_answer_after_the_server_ended_the_pooled_sessions(
    store: jobq.Store, rows: Rows, client: TestClient
) -> None:
    pages = {
        "/": "mail",
        "/tasks": "emails.send",
        f"/tasks/{rows.failed}": "no data for 2026-11-24",
        "/queues": "reports",
        "/workers": WORKER,
        "/cron": "nightly-cleanup",
        "/locks": "deploy",
    }
    for _ in range(ROUNDS):
        for path, text in pages.items():  # the first ones on connections the server ended
            page = client.get(path)
            assert page.status_code == 200, (path, page.text)
            assert text in page.text, path
        end_sessions(store, held_sessions(store))
