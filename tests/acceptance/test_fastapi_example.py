"""examples/fastapi_app.py served by a real uvicorn process, its tasks run by a real
`jobq worker` process, driven over HTTP with httpx; on SQLite and PostgreSQL.

A request waiting for a result leaves the event loop free (other requests are answered
meanwhile) and gets the result as soon as the worker has it; the dashboard under
/admin/jobq answers only the service's admin, and its actions need its CSRF token.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import jobq
from tests.web.test_cli import free_port
from tests.worker_processes import ROOT, Workers

PASSWORD = "example-admin-password"
ADMIN = httpx.BasicAuth("admin", PASSWORD)
CSRF = re.compile(r'<meta name="jobq-csrf" content="([^"]+)">')


@contextmanager
def service(db_url: str, log: Path) -> Iterator[str]:
    """`uvicorn examples.fastapi_app:api` on ``db_url``; its base URL once it answers.
    On leaving it is stopped by SIGTERM, and must end its lifespan cleanly."""
    port = free_port()
    environment = {
        **os.environ, "JOBQ_DATABASE_URL": db_url, "EXAMPLE_ADMIN_PASSWORD": PASSWORD,
        "PYTHONPATH": str(ROOT),
    }  # fmt: skip
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.fastapi_app:api", "--port", str(port)],
            env=environment, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/health", timeout=1).raise_for_status()
                break
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        # uvicorn shuts down, then ends by the signal it was sent (it re-raises it).
        assert process.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()
    assert "Application shutdown complete" in log.read_text(), log.read_text()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_example_service_enqueues_waits_and_serves_the_dashboard(
    db_url: str, tmp_path: Path
) -> None:
    workers = Workers("examples.fastapi_app:app", db_url, tmp_path)
    try:
        with service(db_url, tmp_path / "uvicorn.log") as base:
            asyncio.run(_enqueue_and_wait(base, workers))
            _dashboard(base, db_url)
    finally:
        workers.kill_all()


async def _enqueue_and_wait(base: str, workers: Workers) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        enqueued = await client.post("/counts", json={"text": "to be or not to be"})
        assert enqueued.status_code == 202, enqueued.text
        task_id = enqueued.json()["id"]
        # No worker yet: a short wait ends in 202, saying the task still waits.
        pending = await client.get(f"/counts/{task_id}", params={"wait": 0.2})
        assert (pending.status_code, pending.json()) == (202, {"id": task_id, "status": "queued"})
        assert (await client.get("/counts/999999", params={"wait": 0})).status_code == 404

        waiting = asyncio.create_task(client.get(f"/counts/{task_id}", params={"wait": 30}))
        deadline = time.monotonic() + 20
        # Each answer of /health comes while the other request waits on the same loop.
        while (await client.get("/health")).json()["waiting"] != 1:
            assert time.monotonic() < deadline, "the waiting request never started waiting"
            await asyncio.sleep(0.01)
        assert not waiting.done()
        started = workers.start()
        answer = await waiting
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"id": task_id, "status": "done", "words": 6}
        assert (await client.get("/health")).json() == {"waiting": 0}
    started.process.send_signal(signal.SIGTERM)
    assert started.process.wait(timeout=30) == 0, started.stderr()


def _dashboard(base: str, db_url: str) -> None:
    with httpx.Client(base_url=base, headers={"accept": "text/html"}, timeout=30) as client:
        assert client.get("/admin/jobq/").status_code == 401
        wrong = httpx.BasicAuth("admin", "guess")
        assert client.get("/admin/jobq/", auth=wrong).status_code == 401
        assert client.get("/me", auth=ADMIN).json() == {"user": "admin"}

        page = client.get("/admin/jobq/queues", auth=ADMIN)
        assert page.status_code == 200, page.text
        assert 'href="/admin/jobq/tasks"' in page.text and "counts" in page.text
        found = CSRF.search(page.text)
        assert found, "no CSRF token on the page"

        fields = {"queue": "counts", "confirm": "yes"}
        refused = client.post("/admin/jobq/queues/pause", data=fields, auth=ADMIN)
        assert refused.status_code == 403 and "CSRF" in refused.text
        stranger = client.post("/admin/jobq/queues/pause", data={**fields, "csrf": found[1]})
        assert stranger.status_code == 401
        store = jobq.Store(db_url)
        try:
            assert store.paused_queues() == []
            paused = client.post(
                "/admin/jobq/queues/pause", data={**fields, "csrf": found[1]}, auth=ADMIN
            )
            assert paused.status_code == 303, paused.text
            assert paused.headers["location"].startswith("/admin/jobq/queues")
            assert store.paused_queues() == ["counts"]
        finally:
            store.dispose()
