"""Hostile tasks against real `jobq worker` processes, on every database.

The app is tests/apps/hostile.py. Two promises are checked:

1. A poison outcome (an error message or result the database cannot store as it is, or
   one of 20,000,000 characters; on SQLite, a row whose columns were mangled by hand)
   never crashes or wedges a worker, and never costs the tasks recorded beside it their
   outcomes: the task ends failed (or done, where the database can hold it), the others
   end done, the burst worker exits 0 with no traceback in its log.
2. While its worker lives, a run that overran its timeout still holds what it held: no
   second attempt of its task, no other run of its lock key, no other run in its limit's
   slot starts before its code returned (its row stays in_progress meanwhile). A worker
   whose timed-out sync runs never return (`--max-stuck` of them, each `--stuck-after`
   seconds past its timeout) exits by itself with status 3.

Runs record when their code began and ended (time.time()) in a side table; overlaps are
computed on those intervals. Workers log to files (a 20 MB log line would fill a pipe).
"""

from __future__ import annotations

import itertools
import json
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import jobq
from jobq import Status, testing
from tests.acceptance.test_cli import Cli, sqlite_only
from tests.acceptance.test_worker_processes import wait_until
from tests.apps import hostile
from tests.helpers import set_columns
from tests.worker_processes import Worker, Workers, app_store

pytestmark = pytest.mark.slow

#: Exit status of a worker that gave up because too many of its runs are stuck.
EXIT_STUCK = 3
#: Seconds a worker gets to do what a test waits for (a busy 2-core machine).
DEADLINE = 60
#: The last line of a traceback: the exception raised.
EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


# --- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def store(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[jobq.Store]:
    """The hostile app's Store on ``db_url``, with an empty runs table beside it."""
    yield from app_store(hostile.app, hostile.LOG, db_url, monkeypatch)


@pytest.fixture
def workers(store: jobq.Store, db_url: str, tmp_path: Path) -> Iterator[Workers]:
    started = Workers("tests.apps.hostile:app", db_url, tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def excerpt(log: str, lines: int = 25, width: int = 300) -> str:
    """The end of a log, long lines shortened; the exceptions of its tracebacks first."""
    every = log.splitlines()
    raised = [line for line in every if EXCEPTION.match(line)]
    kept = (["exceptions raised:", *raised[:5], "log ends:"] if raised else []) + every[-lines:]
    return "\n".join(
        line if len(line) <= width else f"{line[:width]}... ({len(line)} characters)"
        for line in kept
    )


def short(text: str | None, width: int = 300) -> str:
    """``text`` for a failure message: a 20 MB string must not be printed whole."""
    if text is None or len(text) <= width:
        return repr(text)
    return f"{text[: width // 2]!r}...{text[-width // 2 :]!r} ({len(text)} characters)"


def retry_lines(log: str, what: str = "will retry") -> int:
    """How many times the log says ``what`` (once a line)."""
    return log.count(what)


def wedged(worker: Worker) -> bool:
    """Whether the worker keeps failing a write ("..., will retry" three times)."""
    return worker.log.read_bytes().count(b"will retry") >= 3


def abort(worker: Worker) -> str:
    """SIGABRT a worker (faulthandler prints every thread's stack); its log."""
    worker.process.send_signal(signal.SIGABRT)
    worker.process.wait(timeout=30)
    return worker.stderr()


def clean_exit(worker: Worker, status: int = 0) -> str:
    """Assert the exited ``worker`` ended with ``status`` and no traceback; its log."""
    log = worker.stderr()
    traceback = "Traceback" in log
    assert worker.process.returncode == status, (
        f"worker exited {worker.process.returncode}, not {status}:\n{excerpt(log)}"
    )
    assert not traceback, f"a traceback in the worker's log:\n{excerpt(log)}"
    return log


def exits_by_itself(worker: Worker, timeout: float, status: int = 0) -> str:
    """Wait for ``worker`` to exit on its own within ``timeout`` s; abort it (and fail)
    if it does not, or if it is wedged (repeating a failed write); its log."""
    deadline = time.monotonic() + timeout
    while worker.process.poll() is None:
        stuck = wedged(worker)
        if stuck or time.monotonic() > deadline:
            log = abort(worker)
            why = "is wedged, repeating a failed write" if stuck else f"ran past {timeout} s"
            raise AssertionError(f"the worker {why}:\n{excerpt(log, lines=80)}")
        time.sleep(0.2)
    return clean_exit(worker, status)


def burst(workers: Workers, *options: str) -> str:
    """Run a `--burst --concurrency 4` worker until it exits (0, no traceback); its log."""
    return exits_by_itself(
        workers.start("--burst", "--concurrency", "4", *options), timeout=2 * DEADLINE
    )


def stop(worker: Worker, timeout: float = 30, *, signalled: bool = False) -> str:
    """SIGTERM ``worker`` (unless ``signalled`` already); it must exit 0 within ``timeout`` s
    with no traceback; its log."""
    if not signalled:
        worker.process.send_signal(signal.SIGTERM)
    try:
        worker.process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log = abort(worker)
        raise AssertionError(
            f"worker still running {timeout} s after SIGTERM:\n{excerpt(log, lines=80)}"
        ) from None
    return clean_exit(worker)


def stop_all(workers: list[Worker], timeout: float = 30) -> None:
    """SIGTERM every one of ``workers`` still running, at once, then ``stop`` each: they
    wind down side by side, not one after the other (once only: a second SIGTERM to a
    `--processes` supervisor stops its processes at once)."""
    running = [worker for worker in workers if worker.process.poll() is None]
    for worker in running:
        worker.process.send_signal(signal.SIGTERM)
    for worker in running:
        stop(worker, timeout, signalled=True)


def alive_until(worker: Worker, condition: Callable[[], bool], timeout: float = DEADLINE) -> None:
    """Wait until ``condition``, failing at once if ``worker`` exits (or wedges) meanwhile."""

    def met() -> bool:
        return condition() or worker.process.poll() is not None or wedged(worker)

    try:
        wait_until(met, timeout=timeout)
    except AssertionError:
        raise AssertionError(
            f"timed out after {timeout} s waiting; the worker's log:\n{excerpt(worker.stderr())}"
        ) from None
    if worker.process.poll() is not None:
        raise AssertionError(
            f"the worker exited ({worker.process.returncode}):\n{excerpt(worker.stderr())}"
        )
    assert condition(), f"the worker is wedged:\n{excerpt(worker.stderr(), lines=80)}"


def json_lines(log: str) -> list[dict[str, Any]]:
    """The lines of a worker's ``--log-format json`` log; a line that is not JSON (a
    faulthandler dump, say) fails the test, shown."""
    lines = []
    for line in log.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"a log line that is not JSON: {line!r}\n{excerpt(log)}") from None
    return lines


def end_line(log: list[dict[str, Any]], task_id: int, attempt: int) -> dict[str, Any]:
    """The line that logged the end of ``attempt`` of ``task_id`` (a record no later
    transition of the row can overwrite)."""
    ends = [
        line for line in log
        if line.get("task_id") == task_id and line.get("attempt") == attempt
        and "status" in line
    ]  # fmt: skip
    assert len(ends) == 1, f"attempt {attempt} of task {task_id} logged {len(ends)} ends: {log}"
    return ends[0]


def get(store: jobq.Store, task_id: int) -> jobq.Task:
    task = store.get(task_id)
    assert task is not None, f"task {task_id} is gone"
    return task


def state(store: jobq.Store, task_id: int) -> str:
    task = get(store, task_id)
    return (
        f"task {task_id} {task.name}: {task.status.value}, attempt {task.attempt}, "
        f"retries_left {task.retries_left}, result {short(task.result)}, error {short(task.error)}"
    )


def assert_done(store: jobq.Store, ids: dict[int, Any]) -> None:
    """Each task of ``ids`` is done with the result given."""
    for task_id, result in ids.items():
        task = get(store, task_id)
        assert (task.status, task.result) == (Status.DONE, result), state(store, task_id)


def enqueue_ok(count: int, start: int = 0) -> dict[int, Any]:
    """``count`` ok tasks; {id: the result each returns}."""
    return {hostile.ok.enqueue(n=n): n for n in range(start, start + count)}


def runs(task_id: int | None = None) -> list[dict[str, Any]]:
    """The recorded runs (of ``task_id``), in start order."""
    stmt = sa.select(hostile.RUNS).order_by(hostile.RUNS.c.started)
    if task_id is not None:
        stmt = stmt.where(hostile.RUNS.c.task_id == task_id)
    with hostile.runs_engine().connect() as conn:
        return [dict(row._mapping) for row in conn.execute(stmt)]


def run_of(task_id: int, attempt: int) -> dict[str, Any] | None:
    found = [run for run in runs(task_id) if run["attempt"] == attempt]
    assert len(found) <= 1, f"attempt {attempt} of task {task_id} ran {len(found)} times"
    return found[0] if found else None


def all_finished(*ids: int) -> bool:
    """Every recorded run of ``ids`` has ended."""
    return all(run["finished"] is not None for task_id in ids for run in runs(task_id))


def terminal(store: jobq.Store, *ids: int) -> bool:
    """Every task of ``ids`` is done, cancelled or failed with no retry left."""
    for task_id in ids:
        task = get(store, task_id)
        if task.status in (Status.QUEUED, Status.IN_PROGRESS):
            return False
        if task.status is Status.FAILED and task.retries_left > 0:
            return False
    return True


def overlaps(recorded: list[dict[str, Any]]) -> list[str]:
    """Each pair of recorded runs of one lock key of which the later began before the
    earlier ended (a run not ended yet lasts for ever)."""
    found = []
    for key in {run["key"] for run in recorded}:
        mine = sorted((r for r in recorded if r["key"] == key), key=lambda r: r["started"])
        for before, after in itertools.pairwise(mine):
            ended = before["finished"] if before["finished"] is not None else float("inf")
            if after["started"] < ended:
                found.append(
                    f"{key}: task {after['task_id']} attempt {after['attempt']} began "
                    f"{after['started'] - before['started']:.2f} s after task "
                    f"{before['task_id']} attempt {before['attempt']}, which ran "
                    f"{ended - before['started']:.2f} s"
                )
    return found


# --- 1. poison outcomes -----------------------------------------------------------------


def test_an_undecodable_character_in_an_error_is_stored_escaped(
    store: jobq.Store, workers: Workers, cli: Cli, db_url: str
) -> None:
    """FileNotFoundError("cannot open \\udcff.csv") (a file name that is not UTF-8): both
    attempts fail, the error is stored with the character escaped, the tasks beside it
    are done, and a worker started afterwards runs other tasks fine."""
    bad = hostile.bad_bytes.enqueue()
    beside = enqueue_ok(3)
    log = burst(workers)
    task = get(store, bad)
    assert (task.status, task.attempt, task.retries_left) == (Status.FAILED, 2, 0), state(
        store, bad
    )
    assert task.error is not None and "cannot open \\udcff.csv" in task.error, state(store, bad)
    assert_done(store, beside)
    assert retry_lines(log) == 0, excerpt(log)

    shown = cli(db_url, "show", str(bad))
    assert shown.returncode == 0, shown.stderr
    assert "cannot open \\udcff.csv" in shown.stdout, shown.stdout

    later = enqueue_ok(2, start=10)
    burst(workers)
    assert_done(store, later)
    assert get(store, bad).status is Status.FAILED


def test_a_nul_in_an_error_is_stored_escaped_and_the_runs_beside_it_keep_their_results(
    store: jobq.Store, workers: Workers, db_url: str
) -> None:
    """ValueError("ab\\x00cd"), with three ok tasks ending in the same batch: the error is
    stored whole, the NUL written as the four characters \\x00; the others are done."""
    bad = hostile.nul_error.enqueue()
    beside = enqueue_ok(3)
    burst(workers)
    task = get(store, bad)
    assert task.status is Status.FAILED, state(store, bad)
    assert task.error is not None and "ab\\x00cd" in task.error, state(store, bad)
    assert_done(store, beside)


def test_results_that_cannot_be_stored_fail_their_tasks_only(
    store: jobq.Store, workers: Workers
) -> None:
    """A lone surrogate in a result (MariaDB's JSON refuses it; arguments are held to the same
    rule), or a result that is not JSON: each task fails saying why, the others are done.
    A NUL is stored on every database (as \u0000 in JSON) and comes back whole."""
    kinds = {"surrogate": "cannot be stored", "object": "not JSON"}
    bad = {hostile.returns.enqueue(kind=kind): kind for kind in kinds}
    nul = hostile.returns.enqueue(kind="nul")
    beside = enqueue_ok(3)
    burst(workers)
    stored = get(store, nul)
    assert (stored.status, stored.result) == (Status.DONE, "ab\x00cd"), state(store, nul)
    for task_id, kind in bad.items():
        task = get(store, task_id)
        assert task.status is Status.FAILED, f"{kind}: {state(store, task_id)}"
        assert task.error is not None and kinds[kind] in task.error, (
            f"{kind}: {state(store, task_id)}"
        )
    assert_done(store, beside)


def test_a_20_mb_result_is_stored_or_refused_without_wedging_the_worker(
    store: jobq.Store, workers: Workers, backend: str
) -> None:
    """MariaDB (max_allowed_packet 16 MB) cannot take it: the task fails saying so;
    PostgreSQL and SQLite store it. Either way the worker goes on: an ok task enqueued
    after it is done within seconds, and no write is retried more than twice."""
    huge = hostile.huge_result.enqueue()
    beside = enqueue_ok(3)
    worker = workers.start("--concurrency", "4", "--grace", "1")
    alive_until(worker, lambda: terminal(store, huge, *beside))
    after = enqueue_ok(1, start=10)
    alive_until(worker, lambda: terminal(store, *after), timeout=20)
    log = stop(worker)

    task = get(store, huge)
    if backend == "mysql":  # MariaDB: max_allowed_packet is 16 MB
        assert task.status is Status.FAILED, state(store, huge)
        assert task.error is not None and "too large for this database" in task.error, state(
            store, huge
        )
    else:  # PostgreSQL and SQLite hold it
        assert task.status is Status.DONE, state(store, huge)
        assert isinstance(task.result, str) and len(task.result) == hostile.HUGE, state(store, huge)
    assert_done(store, beside | after)
    assert retry_lines(log, "capture failed, will retry") <= 2, excerpt(log)


def test_a_20_mb_error_message_fails_its_task_only(store: jobq.Store, workers: Workers) -> None:
    """The task fails (its error possibly shortened, keeping its start and end around a
    "characters cut" marker); the tasks beside it are done; the worker exits 0."""
    huge = hostile.huge_error.enqueue()
    beside = enqueue_ok(3)
    burst(workers)
    task = get(store, huge)
    assert task.status is Status.FAILED, state(store, huge)
    error = task.error or ""
    assert "ValueError" in error and error.rstrip().endswith("x" * 100), state(store, huge)
    assert len(error) >= hostile.HUGE or "characters cut" in error, state(store, huge)
    assert_done(store, beside)


@sqlite_only
def test_arguments_that_are_not_json_fail_the_task_terminally(
    store: jobq.Store, workers: Workers
) -> None:
    """SQLite stores any text in the args column: a row whose args were overwritten by hand
    with 'not json' is readable, and its capture fails it for good, the others are done."""
    mangled = store.enqueue("ok", {"n": 99}, retries=2)
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobq_tasks SET args = 'not json' WHERE id = :id"), {"id": mangled}
        )
    store.get(mangled)  # readable before a worker sees it
    beside = enqueue_ok(3)
    burst(workers)
    task = get(store, mangled)
    assert (task.status, task.retries_left) == (Status.FAILED, 0), state(store, mangled)
    assert task.error is not None and "could not be decoded" in task.error, state(store, mangled)
    assert_done(store, beside)


@sqlite_only
def test_an_error_column_of_invalid_utf8_is_read_and_its_task_retried(
    store: jobq.Store, workers: Workers
) -> None:
    """SQLite stores any bytes as TEXT: a failed row whose error holds invalid UTF-8 (written
    by hand) is readable by Store.get, and a worker captures it and runs it to done."""
    mangled = store.enqueue("ok", {"n": 99}, retries=1)
    set_columns(
        store, mangled, status="failed", attempt=1, retries_left=1,
        run_at=datetime.now(UTC) - timedelta(minutes=1),
    )  # fmt: skip
    with store.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobq_tasks SET error = CAST(x'ff41' AS TEXT) WHERE id = :id"),
            {"id": mangled},
        )
    before = get(store, mangled)
    assert (before.status, before.error is not None) == (Status.FAILED, True)
    beside = enqueue_ok(3)
    burst(workers)
    assert_done(store, {mangled: 99, **beside})
    assert get(store, mangled).attempt == 2


# --- 2. runs that overrun their timeout -------------------------------------------------


def test_a_timed_out_run_keeps_its_lock_key_until_its_code_returns(
    store: jobq.Store, workers: Workers, cli: Cli, db_url: str, tmp_path: Path
) -> None:
    """lock="acct:{acct}", timeout 1 s: attempt 1 of the first task runs on until `jobq
    show` and `jobq status` have said it timed out (then the test releases it). Until it
    returns, its row stays in_progress, and neither its attempt 2 nor the other task of
    the key starts. Then it is failed "timed out after 1 s" (retried after 2 s), and both
    tasks end done."""
    release = tmp_path / "release"
    first = hostile.locked.enqueue(acct=1, release=str(release))
    second = hostile.locked.enqueue(acct=1)
    worker = workers.start("--concurrency", "4", "--grace", "1", "--log-format", "json")
    alive_until(worker, lambda: run_of(first, 1) is not None)
    began = run_of(first, 1)["started"]  # type: ignore[index]

    # While attempt 1 overruns: sample the row, and ask the CLI until it shows the overrun
    # (a CLI process can take seconds to start on a loaded machine); then release it.
    samples: list[tuple[float, float, Status, int]] = []
    shown = status = ""
    seen_by_cli = False
    deadline = time.monotonic() + DEADLINE
    while run_of(first, 1)["finished"] is None:  # type: ignore[index]
        assert worker.process.poll() is None, f"the worker exited:\n{excerpt(worker.stderr())}"
        assert time.monotonic() < deadline, (
            f"attempt 1 never returned; jobq show said:\n{shown}\njobq status said:\n{status}"
            f"\nthe worker's log:\n{excerpt(worker.stderr())}"
        )
        before = time.time()
        task = get(store, first)
        samples.append((before, time.time(), task.status, task.attempt))
        if before > began + 1.5 and not seen_by_cli:
            asked = cli.many(db_url, [["show", str(first)], ["status"]])
            shown, status = (done.stdout for done in asked)
            seen_by_cli = "in_progress" in shown and "timed out" in shown and "timed out" in status
            if seen_by_cli:
                release.touch()
        else:
            time.sleep(0.05)
    ended = run_of(first, 1)["finished"]  # type: ignore[index]
    alive_until(worker, lambda: terminal(store, first, second))
    log = json_lines(stop(worker))

    recorded = runs()
    assert not overlaps(recorded), "runs of one lock key overlapped:\n" + "\n".join(
        overlaps(recorded)
    )
    # Its failure is recorded once it returned, and its retry waits 2 s (FixedBackoff):
    # read from the worker's line for that end, as the row moves on within the 2 s.
    failed = end_line(log, first, 1)
    assert (failed["status"], failed["error"]) == ("failed", "timed out after 1 s"), failed
    assert (failed["retry_in"], failed["final"]) == (2.0, False), failed
    failed_at = datetime.fromisoformat(failed["time"]).timestamp()
    assert failed_at >= ended - 0.001, (failed, ended)  # the time is to the millisecond
    retry = run_of(first, 2)
    # (less 2 ms: the clocks of the line and of SQLite are read to the millisecond)
    assert retry is not None and retry["started"] >= failed_at + 1.998, (failed, recorded)
    # Every end the worker logged was recorded: none found the run taken over (stale).
    [stopped] = [line for line in log if "counts" in line]
    assert not stopped["counts"].get("stale") and not stopped["counts"].get("lost"), stopped
    overrun = [s for s in samples if s[0] >= began + 1.5 and s[1] <= ended]
    assert overrun, f"no sample of the row while attempt 1 overran: {samples}"
    wrong = [
        f"+{t0 - began:.2f} s: {status.value}, attempt {attempt}"
        for t0, _t1, status, attempt in overrun
        if (status, attempt) != (Status.IN_PROGRESS, 1)
    ]
    assert not wrong, f"while attempt 1 ran on (until +{ended - began:.2f} s): {wrong}"
    assert seen_by_cli, f"during the overrun, jobq show:\n{shown}\njobq status:\n{status}"
    task = get(store, first)
    assert (task.status, task.attempt, task.result) == (Status.DONE, 2, 2), state(store, first)
    assert_done(store, {second: 1})


def test_a_timed_out_run_keeps_its_limit_slot_until_its_code_returns(
    store: jobq.Store, workers: Workers
) -> None:
    """Queue "one" limited to one run at once: the first task (timeout 1 s) sleeps 3 s;
    the second starts only once the first's code returned."""
    hostile.app.set_limit("one", concurrency=1)
    first = hostile.one_slot.enqueue(seconds=3)
    second = hostile.one_slot.enqueue(seconds=0)
    worker = workers.start("--concurrency", "4", "--grace", "1")
    alive_until(worker, lambda: terminal(store, first, second) and all_finished(first, second))
    stop(worker)

    one, two = run_of(first, 1), run_of(second, 1)
    assert one is not None and two is not None, runs()
    assert two["started"] >= one["finished"], (
        f"the second run began {two['started'] - one['started']:.2f} s after the first, "
        f"which ran {one['finished'] - one['started']:.2f} s: the slot was given away"
    )
    task = get(store, first)
    assert (task.status, task.error) == (Status.FAILED, "timed out after 1 s"), state(store, first)
    assert_done(store, {second: 0})


def test_async_runs_that_overrun_fail_as_timed_out(store: jobq.Store, workers: Workers) -> None:
    """timeout 1 s: a coroutine that swallows its cancellation and returns 2 s later, then
    one that blocks the event loop for 3 s, both fail "timed out" although they returned
    a value; the swallower's attempt 2 starts only after its attempt 1 returned. (One after
    the other: a blocked loop would hold back the start of a coroutine beside it.)"""
    worker = workers.start("--concurrency", "4", "--grace", "1")
    swallower = hostile.swallower.enqueue()
    alive_until(worker, lambda: terminal(store, swallower) and all_finished(swallower))
    blocker = hostile.blocker.enqueue()
    alive_until(worker, lambda: terminal(store, blocker) and all_finished(blocker))
    stop(worker)

    task = get(store, swallower)
    assert task.status is Status.FAILED, state(store, swallower)
    assert task.error is not None and "timed out" in task.error, state(store, swallower)
    one, two = run_of(swallower, 1), run_of(swallower, 2)
    assert one is not None and two is not None, runs(swallower)
    assert two["started"] >= one["finished"], (
        f"attempt 2 began {two['started'] - one['started']:.2f} s after attempt 1, "
        f"which ran {one['finished'] - one['started']:.2f} s"
    )
    task = get(store, blocker)
    assert (task.status, task.error) == (Status.FAILED, "timed out after 1 s"), state(
        store, blocker
    )


def test_a_worker_whose_runs_are_stuck_exits_3(store: jobq.Store, workers: Workers) -> None:
    """`--concurrency 2 --max-stuck 2 --stuck-after 1`: both sync runs (timeout 1 s) sleep
    600 s. The worker logs that they are stuck and exits 3 within a minute, leaving both
    failed "timed out" with their retry (or retried), not in_progress under a live lease."""
    ids = [hostile.stuck.enqueue(n=n) for n in (1, 2)]
    worker = workers.start("--concurrency", "2", "--max-stuck", "2", "--stuck-after", "1")
    log = exits_by_itself(worker, timeout=DEADLINE, status=EXIT_STUCK)
    assert any("stuck" in line.lower() for line in log.splitlines()), excerpt(log)
    for task_id in ids:
        task = get(store, task_id)
        assert task.status is not Status.IN_PROGRESS, state(store, task_id)
        if task.attempt == 1:
            assert task.status is Status.FAILED and task.retries_left == 1, state(store, task_id)
            assert task.error is not None and "timed out" in task.error, state(store, task_id)


@sqlite_only
def test_max_stuck_0_never_exits_for_stuck_runs(store: jobq.Store, workers: Workers) -> None:
    """`--max-stuck 0`: the stuck runs are put up with; SIGTERM still stops the worker."""
    ids = [hostile.stuck.enqueue(n=n) for n in (1, 2)]
    worker = workers.start(
        "--concurrency", "2", "--max-stuck", "0", "--stuck-after", "1", "--grace", "1"
    )
    alive_until(worker, lambda: all(run_of(task_id, 1) for task_id in ids))
    began = max(run_of(task_id, 1)["started"] for task_id in ids)  # type: ignore[index]
    # Timeout 1 s, stuck after 1 s more: give it 5 s beyond that to (wrongly) exit.
    with pytest.raises(subprocess.TimeoutExpired):
        worker.process.wait(timeout=max(began + 7 - time.time(), 0.1))
    stop(worker, timeout=20)
    for task_id in ids:
        assert get(store, task_id).status is not Status.IN_PROGRESS, state(store, task_id)


@sqlite_only
def test_max_stuck_defaults_to_the_concurrency(
    store: jobq.Store, workers: Workers, cli: Cli, db_url: str
) -> None:
    """One stuck run of a `--concurrency 1` worker is enough; --stuck-after defaults to 60."""
    task_id = hostile.stuck.enqueue(n=1)
    worker = workers.start("--concurrency", "1", "--stuck-after", "1")
    exits_by_itself(worker, timeout=DEADLINE, status=EXIT_STUCK)
    assert get(store, task_id).status is not Status.IN_PROGRESS, state(store, task_id)

    helped = cli(None, "worker", "--help")
    assert helped.returncode == 0, helped.stderr
    text = " ".join(helped.stdout.split())
    assert "--max-stuck" in text, helped.stdout
    stuck_after = re.search(r"--stuck-after(.*?)(?= --|$)", text)
    assert stuck_after and "60" in stuck_after.group(1), helped.stdout


def test_immediate_mode_times_out_a_sync_task() -> None:
    """jobq.testing.immediate: a sync task with timeout 1 s that sleeps 1.5 s fails."""
    with testing.immediate(hostile.app) as store:
        task_id = hostile.sleepy.enqueue(seconds=1.5)
        task = store.get(task_id)
    assert task is not None
    assert (task.status, task.error) == (Status.FAILED, "timed out after 1 s"), task
