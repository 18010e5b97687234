"""Hostile tasks in `jobq worker --pool processes`, against real worker processes, on every
database. The app is tests/apps/pool_app.py.

A process pool must end every task as the thread pool does: the same status, result and
error in the row for a 20 MB result, a NUL, a lone surrogate, a result that is not JSON,
sys.exit(), a BaseException, a task that prints. On top of that, what only processes can
show: a child outlives sys.exit() and a BaseException in its task; a child that calls
os._exit() fails only its own run ("worker child died: exit code 7") and is replaced;
async tasks run in the worker, sync ones in children; progress and parent_results()
cross between child and worker; --max-tasks-per-child replaces children.

Each test runs burst workers (`--burst`) and reads the rows once they exited. Waits are on
conditions, never fixed sleeps. (Timeouts, segfaults, memory and the supervisor are
tests/acceptance/test_process_pool.py's and test_supervisor.py's.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq import Status
from tests.acceptance.test_hostile_tasks import DEADLINE, alive_until, exits_by_itself, get, state
from tests.apps import pool_app
from tests.worker_processes import Workers, app_store

pytestmark = pytest.mark.slow

POOL = ("--pool", "processes")
#: The queue of the thread pool's run in the comparison (the process pool takes "default").
THREADS = "threads"
#: The error jobq stores for a result holding a lone surrogate (jobq.db.payload).
SURROGATE = (
    "task 'returns' returned a result that cannot be stored: it holds a lone surrogate, "
    "which is not Unicode text"
)
NOT_JSON = (
    "task 'returns' returned a result that is not JSON: "
    "Object of type object is not JSON serializable"
)


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, the app's too (its tasks enqueue into it)."""
    yield from app_store(pool_app.app, None, db_url, monkeypatch)


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.pool_app:app", db_url, tmp_path)
    yield started
    started.kill_all()


def enqueue_compared(queue: str) -> dict[str, int]:
    """The tasks whose ends the two pools must record alike, on ``queue``; {kind: id}."""
    kinds = ("huge", "nul", "nul_surrogate", "object")
    ids = {kind: pool_app.returns.enqueue(kind=kind, _queue=queue) for kind in kinds}
    ids["split_pair"] = pool_app.split_pair.enqueue(_queue=queue)
    ids["prints"] = pool_app.prints.enqueue(_queue=queue)
    return ids


def test_hostile_tasks_end_in_child_processes_as_on_threads(
    store: jobq.Store, workers: Workers, backend: str, tmp_path: Path
) -> None:
    """Two burst workers at once: `--pool threads` on queue "threads", `--pool processes
    --concurrency 1` (one child at a time, tasks in enqueue order) on "default".

    - The hostile results, the split surrogate pair, sys.exit(3), the BaseException and
      the printing task end with the same status, result and error in both pools, and
      those are what jobq stores by design: a 20 MB result done (MariaDB: failed, too
      large), a NUL kept, a lone surrogate and a non-JSON object refused, "SystemExit: 3",
      "Abandoned: ...". The printing task is done; its stderr line is in the worker's log.
    - The child that ran sys.exit(3) and the BaseException runs the next tasks (same pid);
      os._exit(7) fails its own run "worker child died: exit code 7" and the next sync
      task runs in a new child: two children started in all, one died.
    - An async task runs in the worker process itself, sync tasks never do.
    - Progress a sync task reports in its child reaches the row while the task still runs
      (it waits for the test to see it).
    - The second node of a chain reads its parent's result with jobq.parent_results() in
      its child.
    - Every task ran once (attempt 1)."""
    release = tmp_path / "release"
    order = {
        "pid before": pool_app.pid.enqueue(),
        "exits": pool_app.exits.enqueue(code=3),
        "pid after exit": pool_app.pid.enqueue(),
        "abandons": pool_app.abandons.enqueue(),
        "pid after abandon": pool_app.pid.enqueue(),
        "dies": pool_app.dies.enqueue(code=7),
        "pid after death": pool_app.pid.enqueue(),
        "async pid": pool_app.async_pid.enqueue(),
        "reports": pool_app.reports.enqueue(path=str(release)),
    }
    in_children = enqueue_compared("default") | order
    chain = jobq.chain(pool_app.first.s(x=5), pool_app.second.s()).enqueue()
    on_threads = enqueue_compared(THREADS)
    on_threads["exits"] = pool_app.exits.enqueue(code=3, _queue=THREADS)
    on_threads["abandons"] = pool_app.abandons.enqueue(_queue=THREADS)

    threads = workers.start("--burst", "--queues", THREADS, "--concurrency", "2")
    children = workers.start("--burst", "--queues", "default", "--concurrency", "1", *POOL)
    reporter = order["reports"]
    # The status is read with the progress, in one read: once the file is there, or past
    # the task's wait for it on a stalled machine, a later read could find it ended.
    reads: list[jobq.Task] = []

    def reported() -> bool:
        reads.append(get(store, reporter))
        return reads[-1].progress == pool_app.PROGRESS

    alive_until(children, reported)
    seen_running = reads[-1].status
    release.touch()
    threads_log = exits_by_itself(threads, DEADLINE)
    children_log = exits_by_itself(children, DEADLINE)

    # The same ends in both pools.
    differ = []
    for kind, thread_id in on_threads.items():
        if kind == "split_pair":
            continue  # checked last (see below)
        here, there = get(store, thread_id), get(store, in_children[kind])
        if (here.status, here.result, here.error) != (there.status, there.result, there.error):
            differ.append(
                f"{kind}:\n  threads:   {state(store, thread_id)}\n"
                f"  processes: {state(store, in_children[kind])}"
            )
    assert not differ, "the pools ended these tasks differently:\n" + "\n".join(differ)
    # And they are what jobq stores by design.
    huge = get(store, in_children["huge"])
    if backend == "mysql":  # MariaDB: max_allowed_packet is 16 MB
        assert huge.status is Status.FAILED, state(store, huge.id)
        assert "too large for this database" in (huge.error or ""), state(store, huge.id)
    else:
        assert huge.status is Status.DONE, state(store, huge.id)
        assert huge.result == "r" * pool_app.HUGE, state(store, huge.id)
    expected: dict[str, tuple[Status, Any, str | None]] = {
        "nul": (Status.DONE, "ab\x00cd", None),
        "nul_surrogate": (Status.FAILED, None, SURROGATE),
        "object": (Status.FAILED, None, NOT_JSON),
        "exits": (Status.FAILED, None, "SystemExit: 3"),
        "abandons": (Status.FAILED, None, "Abandoned: abandoned by the task"),
        "prints": (Status.DONE, "printed", None),
    }
    for kind, (status, result, error) in expected.items():
        task = get(store, in_children[kind])
        assert (task.status, task.result, task.error) == (status, result, error), (
            f"{kind}: {state(store, task.id)}"
        )
    assert pool_app.STDERR_LINE in threads_log and pool_app.STDERR_LINE in children_log

    # Children: sys.exit() and a BaseException leave the child be; os._exit() kills it.
    worker_pid = children.process.pid
    pids = {name: get(store, order[name]).result for name in order if name.startswith("pid")}
    assert pids["pid before"] == pids["pid after exit"] == pids["pid after abandon"], pids
    assert pids["pid after death"] != pids["pid before"], pids
    assert worker_pid not in pids.values(), (worker_pid, pids)
    died = get(store, order["dies"])
    assert (died.status, died.error) == (Status.FAILED, "worker child died: exit code 7"), state(
        store, died.id
    )
    assert f"worker child {pids['pid before']} died: exit code 7" in children_log
    assert "children died: 1" in children_log and "children started: 2" in children_log
    assert get(store, order["async pid"]).result == worker_pid

    # Progress reached the row while the task ran; its end keeps it.
    assert seen_running is Status.IN_PROGRESS
    reported = get(store, reporter)
    assert (reported.status, reported.result) == (Status.DONE, "released"), state(store, reporter)
    assert reported.progress == pool_app.PROGRESS, state(store, reporter)

    # parent_results() in a child.
    parent, node = (get(store, handle) for handle in chain.tasks)
    assert parent.status is Status.DONE, state(store, parent.id)
    assert parent.result == {
        "x": 5, "big": 2**70, "nul": "a\x00b", "nested": [[1.5, None], {"k": []}],
    }  # fmt: skip
    assert node.status is Status.DONE, state(store, node.id)
    assert node.result["parents"] == [parent.result], state(store, node.id)
    assert node.result["pid"] != worker_pid, state(store, node.id)

    every = [*on_threads.values(), *in_children.values(), parent.id, node.id]
    ran_again = [state(store, task_id) for task_id in every if get(store, task_id).attempt != 1]
    assert not ran_again, "\n".join(ran_again)

    # Last, so that a failure here hides nothing above: two lone surrogates side by side
    # (high, then low) are stored escaped each on its own, as jobq.db.payload.storable_text
    # does on threads, not joined into the one character past U+FFFF they would make.
    split, on_a_thread = get(store, in_children["split_pair"]), get(store, on_threads["split_pair"])
    assert split.status is Status.FAILED, state(store, split.id)
    assert (split.error or "").endswith("ValueError: pair \\ud83d\\ude00 split\n"), state(
        store, split.id
    )
    assert split.error == on_a_thread.error, (state(store, split.id), state(store, on_a_thread.id))


def test_max_tasks_per_child_2_replaces_each_child_after_2_runs(
    store: jobq.Store, workers: Workers
) -> None:
    """`--max-tasks-per-child 2 --concurrency 1`: six sync tasks one after the other run
    in three children, two runs each (pids a, a, b, b, c, c), none of them the worker; the
    worker started three children and recycled three (the last after its second run), no
    child died, and every task ran once."""
    ids = [pool_app.pid.enqueue() for _ in range(6)]
    worker = workers.start("--burst", "--concurrency", "1", "--max-tasks-per-child", "2", *POOL)
    log = exits_by_itself(worker, DEADLINE)
    for task_id in ids:
        task = get(store, task_id)
        assert (task.status, task.attempt) == (Status.DONE, 1), state(store, task_id)
    pids = [get(store, task_id).result for task_id in ids]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5], pids
    assert len(set(pids)) == 3 and worker.process.pid not in pids, (worker.process.pid, pids)
    assert "children started: 3" in log and "children recycled: 3" in log, log
    assert "children died" not in log, log
