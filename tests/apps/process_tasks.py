"""A test app for `jobq worker --processes N` and `--pool processes`: runs that must be
killed, children that die or grow, and naps that several processes share.

Every run of ``nap``, ``runaway``, ``ignores_term``, ``burn``, ``oversleeps`` and
``until_cancelled`` records itself in RUNS (task, attempt, pid, when its code began and,
if it got that far, ended: a SIGTERM raises SystemExit in a pool child, so a ``finally``
still records the end). The database URL comes from $JOBQ_DATABASE_URL, as a deployed
worker's would.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import sqlalchemy as sa

import jobq
from jobq.core.retry import FixedBackoff
from tests.apps.run_log import RunLog

app = jobq.App()

RUNS = sa.Table(
    "test_process_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("finished", sa.Double(), nullable=True),
    # attempt 2 of runaway: whether attempt 1's process still existed when it began.
    sa.Column("earlier_alive", sa.Boolean(), nullable=True),
)
LOG = RunLog(RUNS)
LOG.preload()


def _started(earlier_alive: bool | None = None) -> int:
    task = jobq.current_task()
    assert task is not None
    with LOG.engine().begin() as conn:
        return int(
            conn.execute(
                sa.insert(RUNS).values(
                    task_id=task.id, attempt=task.attempt, pid=os.getpid(), started=time.time(),
                    earlier_alive=earlier_alive,
                )
            ).inserted_primary_key[0]
        )  # fmt: skip


def _finished(run_id: int) -> None:
    with LOG.engine().begin() as conn:
        conn.execute(sa.update(RUNS).where(RUNS.c.id == run_id).values(finished=time.time()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@app.task(retries=2)
def nap(seconds: float) -> int:
    """Sleep ``seconds``; the pid of the process it ran in."""
    run_id = _started()
    try:
        time.sleep(seconds)
    finally:
        _finished(run_id)
    return os.getpid()


#: The timeout of runaway and ignores_term: long enough for their first statement (a
#: connection of the child's own) on a busy machine; 3 s once was not, under CI's load.
TIMEOUT = 6


@app.task(timeout=TIMEOUT, retries=1, backoff=FixedBackoff(0))
def runaway() -> int:
    """Attempt 1 busy-loops in pure Python forever (holding the GIL as it can); attempt 2
    records whether attempt 1's process still exists, and returns at once."""
    task = jobq.current_task()
    assert task is not None
    earlier = None
    if task.attempt > 1:
        with LOG.engine().connect() as conn:
            pid = conn.execute(
                sa.select(RUNS.c.pid).where(RUNS.c.task_id == task.id, RUNS.c.attempt == 1)
            ).scalar_one()
        earlier = _alive(pid)
    run_id = _started(earlier)
    try:
        turns = 0
        while task.attempt == 1:
            turns += 1
    finally:
        _finished(run_id)
    return task.attempt


@app.task(timeout=TIMEOUT, retries=0)
def ignores_term() -> None:
    """Ignores SIGTERM and sleeps: only SIGKILL stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _started()
    time.sleep(600)


@app.task(retries=0)
def doomed() -> None:
    """Sleeps ten minutes, its one attempt (the tests kill its process, as the OOM killer
    would)."""
    _started()
    time.sleep(600)


@app.task(retries=0)
def segfault() -> None:
    """Reads address 0: its process dies of SIGSEGV."""
    ctypes.string_at(0)


@app.task(retries=0)
def grow(mb: int) -> int:
    """Allocates and touches ``mb`` MB, then frees it; the pid of its process."""
    block = bytearray(mb * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    del block
    return os.getpid()


@app.task(retries=0)
def pid() -> int:
    """The pid of the process it ran in."""
    return os.getpid()


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(") ")[2][0] != "Z"
    except FileNotFoundError:
        return False


@app.task(retries=1, backoff=FixedBackoff(0))
def burn() -> int:
    """Attempt 1 computes in C for minutes (``sum(range(4 * 10**9))``: no thread of its
    process runs meanwhile, no signal handler either); a later attempt records whether
    attempt 1's process still runs (``earlier_alive``), and returns its attempt."""
    task = jobq.current_task()
    assert task is not None
    if task.attempt == 1:
        _started()
        return sum(range(4 * 10**9))
    with LOG.engine().connect() as conn:
        pid = conn.execute(
            sa.select(RUNS.c.pid).where(RUNS.c.task_id == task.id, RUNS.c.attempt == 1)
        ).scalar_one()
    _finished(_started(_running(pid)))
    return task.attempt


#: The timeout of ``oversleeps``.
SHORT_TIMEOUT = 2


@app.task(timeout=SHORT_TIMEOUT, retries=0)
def oversleeps(seconds: float) -> float:
    """Sleeps ``seconds``, past its timeout (on a thread it returns late; in a pool child
    it is killed at its timeout)."""
    run_id = _started()
    try:
        time.sleep(seconds)
    finally:
        _finished(run_id)
    return seconds


@app.task(retries=0)
def until_cancelled() -> str:
    """Looks for a cancel request every 50 ms, for ten minutes at most."""
    run_id = _started()
    try:
        for _ in range(12_000):
            jobq.check_cancelled()
            time.sleep(0.05)
    finally:
        _finished(run_id)
    return "never cancelled"


@app.task(retries=0)
def exits(code: int) -> None:
    """Calls sys.exit(``code``): a BaseException, which fails its run only."""
    sys.exit(code)
