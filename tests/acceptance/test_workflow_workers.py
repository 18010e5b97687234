"""Workflows run by real `jobq worker` processes on every database (tests/apps/workflows.py).

Chains, groups, chords and a diamond pass their results along; a node failing for good
cancels the nodes after it and nothing else; cancelling a workflow stops its running
nodes and cancels the rest; a worker killed with kill -9 mid-workflow costs reruns only of
the runs it held, each node still running once per capture, and a node it held when its
workflow was cancelled is not run again; and a workflow enqueued in a transaction that
rolls back leaves nothing behind.

Every run records (task id, attempt, pid) in a side table before it does anything else,
so the tests count runs per capture.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status
from jobq.dialects.schema import task_edges, tasks, workflows
from tests import shared_database
from tests.acceptance.test_cli import Cli
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import workflows as flows
from tests.worker_processes import Worker, Workers, app_store

pytestmark = pytest.mark.slow

APP = "tests.apps.workflows:app"
#: The error of a node cancelled with its workflow (jobq/workflows/rows.py says it too).
WITH_ITS_WORKFLOW = "cancelled with its workflow"


# One database per backend for the module, every jobq row deleted before each test.
backend, shared_url, db_url = shared_database.FIXTURES


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """A Store on ``db_url``, the app's too (signatures enqueue into it), with an empty
    runs table beside it."""
    yield from app_store(flows.app, flows.LOG, db_url, monkeypatch)


class SharedPair:
    """Two workers of 8 slots on the module's database, started for the first test that
    asks (``pair``) and kept for the next ones: each such test leaves every node ended,
    so the next starts with idle workers on an empty database. A test that starts workers
    of its own (``workers``: a kill -9, a --burst drain) stops them first."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self.running: list[Worker] = []

    def get(self, store: jobq.Store) -> list[Worker]:
        if not self.running:
            # --retain forever: the elected worker's own pruning of tasks finished over
            # 7 days ago would race the tests that age a row and prune it with the CLI.
            self.running = start(
                self.workers, store, 2, "--concurrency", "8", "--retain", "forever"
            )
        for worker in self.running:  # kept alive through the earlier tests
            assert worker.process.poll() is None, worker.stderr()
        return self.running

    def stop(self) -> None:
        running, self.running = self.running, []
        stop(*running)

    def discard(self) -> None:
        """kill -9 them (a test failed and left runs going): the next test starts anew."""
        self.running = []
        self.workers.kill_all()


@pytest.fixture(scope="module")
def shared_pair(shared_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedPair]:
    started = Workers(APP, shared_url, tmp_path_factory.mktemp("workers"))
    kept = SharedPair(started)
    try:
        yield kept
        kept.stop()
    finally:
        started.kill_all()


@pytest.fixture
def pair(shared_pair: SharedPair, store: jobq.Store) -> Iterator[list[Worker]]:
    """The module's two shared workers, running; discarded if the test left a run going."""
    yield shared_pair.get(store)
    with store.engine.connect() as conn:
        running = conn.execute(
            sa.select(sa.func.count()).where(tasks.c.status == Status.IN_PROGRESS.value)
        ).scalar_one()
    if running:
        shared_pair.discard()


@pytest.fixture
def workers(shared_pair: SharedPair, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    """Workers of the test's own, the only ones running: the shared pair is stopped."""
    shared_pair.stop()
    started = Workers(APP, db_url, tmp_path)
    yield started
    started.kill_all()


# --- helpers ------------------------------------------------------------------------------


def start(workers: Workers, store: jobq.Store, count: int, *options: str) -> list[Worker]:
    """Start ``count`` workers and wait until each has registered (is capturing)."""
    started = [workers.start(*options) for _ in range(count)]
    pids = {worker.process.pid for worker in started}

    def registered() -> bool:
        for worker in started:
            assert worker.process.poll() is None, worker.stderr()
        return pids <= {live.pid for live in store.live_workers()}

    wait_until(registered, timeout=60)
    return started


def stop(*started: Worker) -> None:
    """SIGTERM the workers; each exits 0 within 60 s."""
    for worker in started:
        worker.process.terminate()
    for worker in started:
        assert worker.process.wait(timeout=60) == 0, worker.stderr()


def runs() -> list[dict[str, Any]]:
    """Every recorded run, in the order they were recorded."""
    with flows.runs_engine().connect() as conn:
        rows = conn.execute(sa.select(flows.RUNS).order_by(flows.RUNS.c.id)).all()
    return [dict(row._mapping) for row in rows]


def runs_per_task() -> Counter[int]:
    return Counter(run["task_id"] for run in runs())


def task(store: jobq.Store, task_id: int) -> jobq.Task:
    found = store.get(task_id)
    assert found is not None, f"task {task_id} is gone"
    return found


def ended(store: jobq.Store, handle: jobq.WorkflowHandle) -> bool:
    """Whether every node of the workflow has ended (done, cancelled, failed for good)."""
    return all(
        t.status in (Status.DONE, Status.CANCELLED)
        or (t.status is Status.FAILED and t.finished_at is not None)
        for t in store.workflow_tasks(handle.id)
    )


def assert_parents_ended_first(store: jobq.Store, handle: jobq.WorkflowHandle) -> None:
    """Every node that ran was captured (by the database's clock) once each of its parents
    had ended done: never before."""
    rows = {t.id: t for t in store.workflow_tasks(handle.id)}
    edges = store.workflow_edges(handle.id)
    assert edges, "a workflow with no edges tests nothing here"
    for child_id, _position, parent_id, parent_done in edges:
        child, parent = rows[child_id], rows[parent_id]
        assert parent_done and parent.status is Status.DONE, (child, parent)
        assert child.started_at is not None and parent.finished_at is not None
        assert child.started_at >= parent.finished_at, (child, parent)


def count_rows(store: jobq.Store, table: sa.Table) -> int:
    with store.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()


# --- shapes -------------------------------------------------------------------------------


def test_chains_groups_chords_and_a_diamond_pass_their_results_along(
    store: jobq.Store, pair: list[Worker]
) -> None:
    """Two workers run five workflows at once; each result is what the shape makes of its
    nodes' results, and every node ran once, after its parents had ended."""
    started = pair

    chained = jobq.chain(
        flows.append.s(item="a"), flows.append.s(item="b", pause=0.05), flows.append.s(item="c")
    ).enqueue()
    grouped = jobq.group(flows.value.s(x=n, pause=0.1) for n in range(6)).enqueue()
    chorded = jobq.chord(
        jobq.group(flows.value.s(x=n, pause=0.1) for n in range(1, 11)), flows.total.s()
    ).enqueue()
    diamond = jobq.Workflow()
    top = diamond.add(flows.append.s(item="top"))
    left = diamond.add(flows.append.s(item="left", pause=0.1), after=[top])
    right = diamond.add(flows.append.s(item="right"), after=[top])
    diamond.add(flows.collect.s(), after=[right, left])  # the after= order, not the ids'
    diamond_handle = diamond.enqueue()
    # A chord whose header holds a chain, into a callback that lists its parents' results.
    nested = jobq.chord(
        jobq.group(jobq.chain(flows.value.s(x=5), flows.total.s()), flows.value.s(x=7)),
        flows.collect.s(),
    ).enqueue()

    assert chained.result(timeout=30) == ["a", "b", "c"]
    assert grouped.result(timeout=30) == [0, 1, 2, 3, 4, 5]
    assert chorded.result(timeout=30) == 55
    assert diamond_handle.result(timeout=30) == [["top", "right"], ["top", "left"]]
    assert asyncio.run(nested.wait(timeout=30)) == [5, 7]

    handles = [chained, grouped, chorded, diamond_handle, nested]
    ids = [int(node) for handle in handles for node in handle.tasks]
    assert len(ids) == 3 + 6 + 11 + 4 + 4
    for handle in handles:
        assert [t.status for t in store.workflow_tasks(handle.id)] == [Status.DONE] * len(
            handle.tasks
        )
        assert [t.id for t in store.workflow_tasks(handle.id)] == [int(h) for h in handle.tasks]
        if handle is not grouped:
            assert_parents_ended_first(store, handle)
    recorded = runs()
    # Each node ran once, at its first capture, and both workers took part.
    assert sorted((run["task_id"], run["attempt"]) for run in recorded) == [
        (task_id, 1) for task_id in sorted(ids)
    ]
    assert {run["pid"] for run in recorded} == {worker.process.pid for worker in started}
    assert all(task(store, task_id).attempt == 1 for task_id in ids)


# --- failure and cancellation -------------------------------------------------------------


def test_a_node_failing_for_good_cancels_its_descendants_and_nothing_else(
    store: jobq.Store, pair: list[Worker]
) -> None:
    """``fail`` (retries=1) fails twice; its child and grandchild wait through the retry,
    then end cancelled, naming it; a branch beside it still runs to the end. A parent that
    fails once and then is done releases its child once, after the retry."""
    wf = jobq.Workflow()
    root = wf.add(flows.value.s(x=1))
    bad = wf.add(flows.fail.s(x=2), after=[root])
    child = wf.add(flows.total.s(), after=[bad])
    wf.add(flows.collect.s(), after=[child, root])
    branch = wf.add(flows.value.s(x=3, pause=0.3), after=[root])
    wf.add(flows.total.s(), after=[branch, root])
    handle = wf.enqueue()
    root_id, bad_id, child_id, grandchild_id, branch_id, branch_end_id = map(int, handle.tasks)
    # A chord one of whose members fails: the callback is cancelled, the others run.
    chorded = jobq.chord(
        jobq.group(flows.value.s(x=1), flows.fail.s(x=9), flows.value.s(x=3, pause=0.2)),
        flows.total.s(),
    ).enqueue()
    member_ok, member_bad, member_slow, callback = map(int, chorded.tasks)
    # A parent that fails once, then is done: its child waits through the retry.
    retried = jobq.chain(flows.flaky.s(x=4), flows.total.s()).enqueue()
    flaky_id, after_flaky = map(int, retried.tasks)

    with pytest.raises(jobq.TaskCancelled) as cancelled:
        handle.result(timeout=30)  # its first final node: the grandchild
    assert cancelled.value.task_id == grandchild_id
    assert handle.tasks[5].result(timeout=30) == 3 + 1
    with pytest.raises(jobq.TaskCancelled) as chord_cancelled:
        chorded.result(timeout=30)
    assert chord_cancelled.value.task_id == callback
    assert retried.result(timeout=30) == 4
    wait_until(lambda: ended(store, handle) and ended(store, chorded))
    assert task(store, flaky_id).attempt == 2
    assert_parents_ended_first(store, retried)  # captured after the retry's end, not before

    because = f"cancelled: task {bad_id} (fail), which it waits for, failed"
    for node in (child_id, grandchild_id):
        row = task(store, node)
        assert (row.status, row.error, row.attempt) == (Status.CANCELLED, because, 0), row
        assert row.finished_at is not None and row.started_at is None
    assert chord_cancelled.value.error == (
        f"cancelled: task {member_bad} (fail), which it waits for, failed"
    )
    failed = task(store, bad_id)
    # Cancelled with the failure for good (its write, or after), not at the first failure.
    for node in (child_id, grandchild_id):
        assert task(store, node).finished_at >= failed.finished_at  # type: ignore[operator]
    assert (failed.status, failed.attempt, failed.retries_left) == (Status.FAILED, 2, 0)
    assert failed.finished_at is not None and "fail(2) fails every time" in (failed.error or "")
    for node in (root_id, branch_id, branch_end_id, member_ok, member_slow):
        assert task(store, node).status is Status.DONE
    assert task(store, member_slow).result == 3
    # The cancelled nodes never ran; the failing ones ran once per attempt; the rest once.
    per_task = runs_per_task()
    assert per_task == {
        root_id: 1, bad_id: 2, branch_id: 1, branch_end_id: 1,
        member_ok: 1, member_bad: 2, member_slow: 1, flaky_id: 2, after_flaky: 1,
    }  # fmt: skip
    assert Counter((r["task_id"], r["attempt"]) for r in runs()).most_common(1)[0][1] == 1


def test_cancelling_a_workflow_stops_its_running_nodes_and_cancels_the_rest(
    store: jobq.Store, pair: list[Worker]
) -> None:
    """cancel() mid-run: the two running nodes see their requests and stop (no rerun),
    a blocked one and a queued one (due in 10 minutes) are cancelled at once; the node
    done before stays done."""
    logged = [len(worker.stderr()) for worker in pair]  # what earlier tests' runs wrote
    wf = jobq.Workflow()
    first = wf.add(flows.value.s(x=1))
    running = wf.add(flows.slow.s(seconds=120), after=[first])
    wf.add(flows.total.s(), after=[running])
    wf.add(flows.slow.s(seconds=120))
    wf.add(flows.value.s(x=2, _delay=600))
    handle = wf.enqueue()
    first_id, running_id, blocked_id, side_id, later_id = map(int, handle.tasks)

    def both_running() -> bool:
        recorded = {run["task_id"] for run in runs()}
        return {running_id, side_id} <= recorded and all(
            task(store, node).status is Status.IN_PROGRESS for node in (running_id, side_id)
        )

    wait_until(both_running)
    assert task(store, blocked_id).status is Status.BLOCKED
    assert task(store, later_id).status is Status.QUEUED
    # Two waiting nodes cancelled at once, two running ones asked to stop.
    assert handle.cancel() == 4
    for node in (blocked_id, later_id):
        row = task(store, node)
        assert (row.status, row.error, row.attempt) == (Status.CANCELLED, WITH_ITS_WORKFLOW, 0)
    wait_until(lambda: ended(store, handle))
    with pytest.raises(jobq.TaskCancelled):
        handle.result(timeout=0)
    assert handle.cancel() == 0  # nothing left to cancel

    assert task(store, first_id).status is Status.DONE
    for node in (running_id, side_id):
        row = task(store, node)
        assert (row.status, row.error, row.attempt) == (
            Status.CANCELLED, "cancelled on request", 1,
        ), row  # fmt: skip
        assert row.cancel_requested_at is not None and row.finished_at is not None
        # Stopped by the request (the worker looks every half second), not after 120 s.
        assert (row.finished_at - row.cancel_requested_at).total_seconds() < 10, row
    assert runs_per_task() == {first_id: 1, running_id: 1, side_id: 1}
    said = [
        f"task {node} attempt 1: cancel requested; stopping it" for node in (running_id, side_id)
    ]

    def logs() -> str:
        """What the workers logged since this test began (they run on: lines may follow)."""
        return "".join(w.stderr()[since:] for w, since in zip(pair, logged, strict=True))

    wait_until(lambda: all(line in logs() for line in said), timeout=10)


#: Rounds of the race of cancel() against retrying roots, and the shape of each round's
#: workflow: roots retrying every 20 ms on 16 slots, and nodes after each root (a larger
#: workflow makes a longer cancel for the runs to end into).
CANCEL_ROUNDS = 8
ROOTS = 16
AFTER_EACH_ROOT = 120


def cancelled_for_good(node: jobq.Task) -> bool:
    """Whether ``node`` can never start again: ended, or running with its cancel asked
    for (its end is then recorded cancelled unless done or failed for good)."""
    finished = node.status in (Status.DONE, Status.CANCELLED) or (
        node.status is Status.FAILED and node.finished_at is not None
    )
    return finished or (node.status is Status.IN_PROGRESS and node.cancel_requested_at is not None)


def test_cancel_races_retrying_roots_and_no_node_starts_again(
    store: jobq.Store, pair: list[Worker]
) -> None:
    """Round after round, a workflow of 16 roots that retry every 20 ms (2 workers x 8
    slots run them) is cancelled mid-retries. Once cancel() has returned, every node has
    ended or has its cancel asked for (no later write undoes either); then every node
    ends, none captured again after the cancel."""
    for number in range(CANCEL_ROUNDS):
        cancel_mid_retries(store, number)


def cancel_mid_retries(store: jobq.Store, number: int) -> None:
    """One round of the race above (``number`` names it in failures)."""
    wf = jobq.Workflow()
    roots = [wf.add(flows.retrying.s()) for _ in range(ROOTS)]
    for root in roots:
        for n in range(AFTER_EACH_ROOT):
            wf.add(flows.value.s(x=n), after=[root])
    handle = wf.enqueue()
    root_ids = {int(node) for node in handle.tasks[:ROOTS]}

    def retrying() -> bool:
        nodes = store.workflow_tasks(handle.id)
        return all(t.attempt >= 2 for t in nodes if t.id in root_ids)

    wait_until(retrying, timeout=60)
    handle.cancel()
    nodes = store.workflow_tasks(handle.id)
    escaped = [
        (t.id, t.status, t.retries_left, t.cancel_requested_at)
        for t in nodes
        if not cancelled_for_good(t)
    ]
    assert not escaped, f"round {number}: nodes left able to start again: {escaped}"
    attempts = {t.id: t.attempt for t in nodes}
    wait_until(lambda: ended(store, handle), timeout=60)
    nodes = store.workflow_tasks(handle.id)
    assert {t.id: t.attempt for t in nodes} == attempts, f"round {number}: captured again"
    assert {t.status for t in nodes} == {Status.CANCELLED}, f"round {number}"


def test_pruning_keeps_a_finished_parent_while_its_sibling_runs(
    store: jobq.Store, pair: list[Worker], db_url: str, tmp_path: Path
) -> None:
    """A, B -> C on real workers: A is done, finished 9 days ago; B still runs. `jobq
    prune --older-than 7d` deletes nothing (C needs A's result); C then gets both
    parents' results. Once C is done, the same prune deletes A."""
    gate = tmp_path / "gate"
    wf = jobq.Workflow()
    a = wf.add(flows.value.s(x=10))
    b = wf.add(flows.gated.s(path=str(gate)))
    wf.add(flows.collect.s(), after=[a, b])
    handle = wf.enqueue()
    a_id, b_id, c_id = map(int, handle.tasks)
    wait_until(lambda: task(store, a_id).status is Status.DONE and runs_per_task()[b_id] == 1)
    # A ended for good: no worker writes its row again.
    long_ago = datetime.now(UTC) - timedelta(days=9)
    with store.engine.begin() as conn:
        conn.execute(sa.update(tasks).where(tasks.c.id == a_id).values(finished_at=long_ago))
    cli = Cli(tmp_path)
    kept = cli(db_url, "prune", "--older-than", "7d")
    assert (kept.returncode, kept.stdout) == (0, "deleted 0 tasks\n"), kept.stderr
    gate.touch()
    assert handle.result(timeout=60) == [10, str(gate)]
    pruned = cli(db_url, "prune", "--older-than", "7d")
    assert (pruned.returncode, pruned.stdout) == (0, "deleted 1 task\n"), pruned.stderr
    assert store.get(a_id) is None and task(store, c_id).status is Status.DONE


BULK_ACTIONS = [
    (["cancel", "--queue", "victimq"], "cancelled 1 waiting task of queue 'victimq'\n"),
    (["purge", "victimq", "--yes"], "deleted 1 waiting task of queue 'victimq'\n"),
]


@pytest.mark.parametrize(("command", "said"), BULK_ACTIONS)
def test_a_bulk_cancel_or_purge_takes_a_blocked_node_and_the_nodes_after_it(
    store: jobq.Store,
    workers: Workers,
    db_url: str,
    tmp_path: Path,
    command: list[str],
    said: str,
) -> None:
    """chain(gated, victim in queue victimq, a node after it): while a worker runs gated,
    `jobq cancel --queue victimq` (or `jobq purge victimq --yes`) takes victim, blocked,
    and cancels the node after it, naming victim. gated then ends done and releases
    nothing: neither node ever runs."""
    started = start(workers, store, 2)
    gate = tmp_path / "gate"
    handle = jobq.chain(
        flows.gated.s(path=str(gate)), flows.value.s(x=1, _queue="victimq"), flows.value.s(x=2)
    ).enqueue()
    gated_id, victim_id, after_id = map(int, handle.tasks)
    wait_until(lambda: runs_per_task()[gated_id] == 1)
    done = Cli(tmp_path)(db_url, *command)
    assert (done.returncode, done.stdout) == (0, said), done.stderr
    gate.touch()
    wait_until(lambda: task(store, gated_id).status is Status.DONE)
    # Its end would have queued victim in the transaction that recorded it.
    victim = store.get(victim_id)
    if command[0] == "purge":
        assert victim is None
        reason = f"cancelled: task {victim_id}, which it waits for, no longer exists"
    else:
        assert victim is not None and victim.status is Status.CANCELLED, victim
        reason = f"cancelled: task {victim_id} (value), which it waits for, was cancelled"
    after = task(store, after_id)
    assert (after.status, after.error, after.attempt) == (Status.CANCELLED, reason, 0)
    stop(*started)
    drain = workers.start("--burst", "--burst-wait", "0")
    assert drain.process.wait(timeout=60) == 0, drain.stderr()
    assert runs_per_task() == {gated_id: 1}


# --- kill -9 ------------------------------------------------------------------------------


def test_kill_9_mid_workflow_runs_each_node_once_per_capture(
    store: jobq.Store, workers: Workers
) -> None:
    """A chord of 200 members into one callback, beside a chain of 5, on three workers;
    one is killed with kill -9 while it runs members. Every node ends done; no capture
    ran twice; each node ran again only for attempts the killed worker held; the
    callback ran once, with all 200 results in order."""
    started = start(workers, store, 3, "--concurrency", "8")
    victim = started[0]
    victim_id = next(w.worker_id for w in store.live_workers() if w.pid == victim.process.pid)
    members = jobq.group(flows.value.s(x=n, pause=0.2) for n in range(200))
    steps = jobq.chain(*(flows.append.s(item=str(n), pause=0.3) for n in range(5)))
    handle = jobq.group(jobq.chord(members, flows.collect.s()), steps).enqueue()
    callback_id = int(handle.tasks[200])

    def victim_runs_members() -> bool:
        """The victim has run a dozen members, and holds at least three whose runs began."""
        with store.engine.connect() as conn:
            held = set(
                conn.execute(
                    sa.select(tasks.c.id, tasks.c.attempt).where(
                        tasks.c.workflow_id == handle.id,
                        tasks.c.status == Status.IN_PROGRESS.value,
                        tasks.c.locked_by == victim_id,
                        tasks.c.name == "value",
                    )
                ).all()
            )
        begun = {(r["task_id"], r["attempt"]) for r in runs() if r["pid"] == victim.process.pid}
        return len(begun) >= 12 and len(held & begun) >= 3

    wait_until(victim_runs_members)
    victim.process.kill()
    victim.process.wait(timeout=30)

    result = handle.result(timeout=60)
    assert result == [list(range(200)), ["0", "1", "2", "3", "4"]]
    wait_until(lambda: ended(store, handle))
    stop(*started[1:])

    nodes = store.workflow_tasks(handle.id)
    assert len(nodes) == 200 + 1 + 5
    assert [t.status for t in nodes] == [Status.DONE] * len(nodes), [
        (t.id, t.status, t.error) for t in nodes if t.status is not Status.DONE
    ]
    recorded = runs()
    per_capture = Counter((run["task_id"], run["attempt"]) for run in recorded)
    assert per_capture.most_common(1)[0][1] == 1, "a capture ran twice"
    pid_of = {(run["task_id"], run["attempt"]): run["pid"] for run in recorded}
    extra = 0
    for node in nodes:
        # Its last attempt ran (once) and ended it; each earlier one was a capture of the
        # killed worker's (a run it began, or one it captured and never began).
        assert (node.id, node.attempt) in pid_of, node
        for attempt in range(1, node.attempt):
            pid = pid_of.get((node.id, attempt), victim.process.pid)
            assert pid == victim.process.pid, f"task {node.id} attempt {attempt} ran on {pid}"
        extra += node.attempt - 1
    # The kill cost reruns (it held runs), at most one per slot the victim had.
    assert 1 <= extra <= 8, extra
    callback = task(store, callback_id)
    assert callback.attempt == 1
    assert sum(1 for r in recorded if r["task_id"] == callback_id) == 1
    assert_parents_ended_first(store, handle)


def test_a_workflow_cancelled_while_a_killed_worker_holds_a_node_does_not_run_it_again(
    store: jobq.Store, workers: Workers
) -> None:
    """kill -9 of the only worker mid-node, then cancel(): the node's lease lapses with
    its cancel asked for; the next worker ends it cancelled (as rescue does) instead of
    running it again, and the node after it never runs. Such a node is rescued, not
    captured again, and the victim did the upkeep: with --rescue-interval 1 its upkeep
    lease lapses after 4 s, not 20."""
    (victim,) = start(workers, store, 1, "--rescue-interval", "1")
    handle = jobq.chain(flows.slow.s(seconds=120), flows.value.s(x=1)).enqueue()
    held_id, after_id = map(int, handle.tasks)
    wait_until(lambda: runs_per_task()[held_id] == 1)
    victim.process.kill()
    victim.process.wait(timeout=30)
    assert handle.cancel() == 2  # the node after it at once, the held one by a request
    (healthy,) = start(workers, store, 1, "--rescue-interval", "1")
    wait_until(lambda: ended(store, handle), timeout=30)
    stop(healthy)

    held = task(store, held_id)
    assert (held.status, held.error) == (Status.CANCELLED, "cancelled on request"), held
    after = task(store, after_id)
    assert (after.status, after.error, after.attempt) == (Status.CANCELLED, WITH_ITS_WORKFLOW, 0)
    # The cancelled node's code did not start again after the kill.
    assert [(r["attempt"], r["pid"]) for r in runs()] == [(1, victim.process.pid)], held


# --- a transaction that rolls back ---------------------------------------------------------


def test_a_workflow_enqueued_in_a_transaction_that_rolls_back_leaves_nothing(
    store: jobq.Store, workers: Workers
) -> None:
    """The rolled-back workflow's rows were written in the caller's transaction and
    went with it; a worker started afterwards runs only a workflow committed since."""
    label = "rolled back"
    with pytest.raises(RuntimeError, match="roll back"), store.engine.begin() as conn:
        gone = jobq.chord(
            jobq.group(flows.append.s(item=label) for _ in range(5)), flows.collect.s()
        ).enqueue(connection=conn)
        # Written, in this transaction: six nodes, five edges.
        of_workflow = tasks.c.workflow_id == gone.id
        assert conn.execute(sa.select(sa.func.count()).where(of_workflow)).scalar_one() == 6
        assert count_edges(conn, gone.id) == 5
        raise RuntimeError("roll back")
    for table in (tasks, workflows, task_edges):
        assert count_rows(store, table) == 0, table.name
    assert store.workflow_tasks(gone.id) == []
    with pytest.raises(jobq.WorkflowNotFound):
        gone.cancel()

    with store.engine.begin() as conn:
        kept = jobq.chain(flows.append.s(item="kept"), flows.append.s(item="too")).enqueue(
            connection=conn
        )
    burst = workers.start("--burst", "--burst-wait", "0")
    assert burst.process.wait(timeout=60) == 0, burst.stderr()

    assert kept.result(timeout=0) == ["kept", "too"]
    recorded = runs()
    assert sorted(run["task_id"] for run in recorded) == sorted(map(int, kept.tasks))
    assert label not in {json.loads(run["args"])["item"] for run in recorded}
    assert count_rows(store, tasks) == 2 and count_rows(store, workflows) == 1


def count_edges(conn: sa.Connection, workflow_id: int) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(task_edges.join(tasks, tasks.c.id == task_edges.c.child_id))
        .where(tasks.c.workflow_id == workflow_id)
    )
    return conn.execute(query).scalar_one()
