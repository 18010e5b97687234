"""`jobq workflow show ID`, and what `jobq show` and `jobq why` say of a workflow node's
parents, run as a user runs them, on every database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jobq
from jobq import Status
from jobq.db.tasks import Completion
from tests.acceptance.test_cli import Cli, failure


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def end_run(store: jobq.Store, task_id: int, status: Status, error: str | None = None) -> None:
    """Capture task ``task_id`` (the only one due) and end its run with ``status``."""
    (task,) = store.capture(1, worker_id="w")
    assert task.id == task_id
    end = Completion(task.id, task.attempt, status, error=error, in_workflow=True)
    assert store.set_statuses([end]) == 1


def test_show_why_and_workflow_show_name_the_parents(cli: Cli, db_url: str) -> None:
    app = jobq.App(db_url)

    @app.task(retries=0)
    def fetch(url: str) -> str:
        return url

    @app.task()
    def merge() -> int:
        return 0

    wf = jobq.Workflow()
    a = wf.add(fetch.s(url="a"))
    b = wf.add(fetch.s(url="b"))
    wf.add(merge.s(), after=[a, b])
    handle = wf.enqueue()
    first, second, last = (int(h) for h in handle.tasks)
    end_run(app.store, first, Status.DONE)

    show, show_json, why, why_json, graph, graph_json = cli.many(
        db_url,
        [
            ["show", str(last)],
            ["show", str(last), "--json"],
            ["why", str(last)],
            ["why", str(last), "--json"],
            ["workflow", "show", str(handle.id)],
            ["workflow", "show", str(handle.id), "--json"],
        ],
    )
    assert (show.returncode, show.stderr) == (0, ""), show
    assert f"waits for 1 of its 2 parent(s): {second} (queued)" in show.stdout
    assert f"workflow_id          {handle.id}" in show.stdout
    document = json.loads(show_json.stdout)
    assert document["after"] == [first, second]
    assert document["status"] == "blocked"

    assert why.stdout.splitlines()[0] == f"task {last}: waiting_for_parents"
    assert f"waits for 1 of its 2 parent(s): task {second} (fetch, queued)" in why.stdout
    details = json.loads(why_json.stdout)["details"]
    assert details["parents"] == [first, second]
    assert details["waiting_for"] == [{"id": second, "name": "fetch", "status": "queued"}]

    assert (graph.returncode, graph.stderr) == (0, ""), graph
    lines = [" ".join(line.split()) for line in graph.stdout.splitlines()]
    assert lines[0] == f"workflow {handle.id}: 3 node(s)"
    assert lines[2:5] == [
        f"{first} fetch done -",
        f"{second} fetch queued -",
        f"{last} merge blocked {first} done, {second} queued",
    ]
    assert lines[5] == "queued 1 done 1 blocked 1"
    nodes = json.loads(graph_json.stdout)["nodes"]
    assert [(n["id"], n["status"], n["after"]) for n in nodes] == [
        (first, "done", []),
        (second, "queued", []),
        (last, "blocked", [first, second]),
    ]

    end_run(app.store, second, Status.FAILED, error="Traceback ...\nOSError: b is gone")
    show, graph = cli.many(db_url, [["show", str(last)], ["workflow", "show", str(handle.id)]])
    assert f"runs after {first} (done), {second} (failed)" in show.stdout
    cancelled_line = f"cancelled: task {second} (fetch), which it waits for, failed"
    assert cancelled_line in show.stdout
    assert f"{second} fetch failed - OSError: b is gone" in " ".join(graph.stdout.split())
    assert cancelled_line in graph.stdout
    app.store.dispose()


def test_workflow_show_of_an_unknown_id_is_one_error_line(cli: Cli, db_url: str) -> None:
    text = cli(db_url, "workflow", "show", "987654321")
    assert failure(text) == (
        "error: There is no workflow 987654321 (it never existed, or its nodes were pruned)."
    )
