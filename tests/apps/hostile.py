"""A test app of hostile tasks: outcomes a database may refuse, runs that overrun their
timeout, runs that never end, and CPU-bound runs that hold the GIL.

- Poison outcomes: ``bad_bytes`` and ``nul_error`` raise errors holding an undecodable
  character or a NUL, ``returns`` returns a value that cannot be stored (a lone surrogate,
  a NUL, an object), ``huge_result`` and ``huge_error`` return or raise 20,000,000
  characters. ``ok`` is the well-behaved neighbour.
- Overruns: ``locked`` (lock key ``acct:{acct}``), ``one_slot`` (queue ``one``, which the
  tests limit to one run at once), ``sleepy``, ``stuck``, ``blocker`` and ``swallower``
  have a 1 s timeout and run longer, some only on their first attempt.
- ``spin`` busy-loops in pure Python (no sleeps, no I/O) for ``seconds``.
- ``long_first`` (retries=0) sleeps long on its first attempt only.

Every run of the tasks that overrun records itself in RUNS: its task, attempt, lock key,
pid, and when its code began and ended (time.time(); ``finished`` stays NULL while it
runs), so that tests compute overlaps from the intervals. The database URL comes from
$JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import sqlalchemy as sa

import jobq
from jobq.core.retry import FixedBackoff
from tests.apps.run_log import RunLog

app = jobq.App()
NOW = FixedBackoff(0)
#: Characters in the result or error message of the huge tasks.
HUGE = 20_000_000

RUNS = sa.Table(
    "test_hostile_runs",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("key", sa.String(100), nullable=True),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started", sa.Double(), nullable=False),
    sa.Column("finished", sa.Double(), nullable=True),
)

LOG = RunLog(RUNS)
runs_engine = LOG.engine


def _started(key: str | None = None) -> tuple[int, int]:
    """Record the start of the current run; (row id of the record, attempt)."""
    started = time.time()
    task = jobq.current_task()
    assert task is not None
    with runs_engine().begin() as conn:
        run_id = conn.execute(
            sa.insert(RUNS).values(
                task_id=task.id, attempt=task.attempt, name=task.name, key=key,
                pid=os.getpid(), started=started,
            )
        ).inserted_primary_key[0]  # fmt: skip
    return run_id, task.attempt


def _finished(run_id: int) -> None:
    finished = time.time()
    with runs_engine().begin() as conn:
        conn.execute(sa.update(RUNS).where(RUNS.c.id == run_id).values(finished=finished))


# --- poison outcomes -------------------------------------------------------------------


@app.task(retries=0)
def ok(n: int) -> int:
    return n


@app.task(retries=1, backoff=NOW)
def bad_bytes() -> None:
    raise FileNotFoundError("cannot open " + os.fsdecode(b"\xff.csv"))


@app.task(retries=0)
def nul_error() -> None:
    # Built at run time: the traceback's copy of this line must not hold "ab\x00cd".
    raise ValueError("ab" + chr(0) + "cd")


@app.task(retries=0)
def returns(kind: str) -> Any:
    """A result that cannot be stored: a lone surrogate, a NUL, or not JSON at all."""
    return {"surrogate": os.fsdecode(b"\xff"), "nul": "ab\x00cd", "object": object()}[kind]


@app.task(retries=0)
def huge_result() -> str:
    return "r" * HUGE


@app.task(retries=0)
def huge_error() -> None:
    raise ValueError("x" * HUGE)


# --- overruns ---------------------------------------------------------------------------


#: Seconds a run waits at most for the file that releases it.
RELEASE_WAIT = 120


@app.task(lock="acct:{acct}", timeout=1, retries=1, backoff=FixedBackoff(2))
def locked(acct: int, release: str | None = None) -> int:
    """Holds lock key acct:{acct}; its first attempt runs on, past its timeout, until the
    file ``release`` exists (when given; RELEASE_WAIT s at most), later ones return at
    once. A failed attempt is retried after 2 s."""
    run_id, attempt = _started(f"acct:{acct}")
    deadline = time.monotonic() + RELEASE_WAIT
    while attempt == 1 and release is not None and not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} did not appear within {RELEASE_WAIT} s")
        time.sleep(0.02)
    _finished(run_id)
    return attempt


@app.task(queue="one", timeout=1, retries=0)
def one_slot(seconds: float) -> float:
    run_id, _ = _started("one")
    time.sleep(seconds)
    _finished(run_id)
    return seconds


@app.task(timeout=1, retries=0)
def sleepy(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(timeout=1, retries=1, backoff=NOW)
def stuck(n: int) -> int:
    """Its first attempt sleeps 600 s (a hung call); later ones return at once."""
    run_id, attempt = _started()
    if attempt == 1:
        time.sleep(600)
    _finished(run_id)
    return n


@app.task(timeout=1, retries=0)
async def blocker() -> str:
    """Blocks the event loop for 3 s: asyncio cannot cancel it at its timeout."""
    run_id, _ = _started()
    time.sleep(3)
    _finished(run_id)
    return "late"


@app.task(timeout=1, retries=1, backoff=NOW)
async def swallower() -> str:
    """Swallows the cancellation at its timeout, and goes on for 2 s more."""
    run_id, _ = _started()
    try:
        await asyncio.sleep(3)
    except asyncio.CancelledError:
        await asyncio.sleep(2)
    finally:
        _finished(run_id)
    return "late"


@app.task(retries=2)
def spin(seconds: float) -> int:
    """Busy-loops in pure Python for ``seconds``, holding the GIL as much as it can."""
    _started()
    deadline = time.monotonic() + seconds
    turns = 0
    while time.monotonic() < deadline:
        for _ in range(10_000):
            turns += 1
    return turns


@app.task(retries=0)
def long_first(seconds: float) -> int:
    """Sleeps ``seconds`` on its first attempt only, recording its run (its pid: a pool
    child's, with --pool processes); returns the attempt. No retry: only a release, which
    spends none, lets it run again."""
    run_id, attempt = _started()
    if attempt == 1:
        time.sleep(seconds)
    _finished(run_id)
    return attempt
