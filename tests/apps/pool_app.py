"""A test app for `jobq worker --pool processes`: what a task can do to the child process
it runs in, and what must cross from the child to the worker intact.

- ``pid`` and ``async_pid`` return the pid of the process they ran in (a pool child; the
  worker itself for an async task).
- ``returns(kind)`` returns a hostile result: ``huge`` (20,000,000 characters), ``nul``
  (a NUL), ``nul_surrogate`` (a NUL and a lone surrogate, which jobq refuses to store),
  ``object`` (not JSON).
- ``split_pair`` raises an error holding a high and a low surrogate side by side, each
  on its own (two lone surrogates, not one character past U+FFFF).
- ``exits(code)`` calls sys.exit(code), ``dies(code)`` calls os._exit(code), ``abandons``
  raises a BaseException that is not an Exception.
- ``prints`` writes to stdout (text that looks like a frame of the pool, and a NUL) and a
  line to stderr, then returns.
- ``reports(path)`` reports progress, then waits for ``path`` to exist (the test creates it
  once it saw the progress in the row).
- ``first(x)`` and ``second()`` make a chain: ``second`` returns its parents' results
  (jobq.parent_results(), read in the child) and its pid.

Every task that fails has ``retries=0``: it runs once and fails for good. The database URL
comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import jobq

app = jobq.App()

#: Characters in the result of returns(kind="huge").
HUGE = 20_000_000
#: The progress reports(path) reports.
PROGRESS = {"current": 3, "total": 10, "message": "three of ten"}
#: What prints() writes to stderr (the worker's log, as the child inherits it).
STDERR_LINE = "pool_app.prints: a line on stderr"
#: Seconds reports(path) waits for its file before it gives up.
WAIT_FOR_FILE = 60


class Abandoned(BaseException):
    """Not an Exception: what abandons() raises."""


@app.task
def pid() -> int:
    return os.getpid()


@app.task
async def async_pid() -> int:
    return os.getpid()


@app.task(retries=0)
def returns(kind: str) -> Any:
    # Built at run time, so that no source line (which a traceback quotes) holds them.
    nul, surrogate = chr(0), chr(0xDCFF)
    values = {
        "huge": lambda: "r" * HUGE,
        "nul": lambda: f"ab{nul}cd",
        "nul_surrogate": lambda: f"ab{nul}cd{surrogate}ef",
        "object": object,
    }
    return values[kind]()


@app.task(retries=0)
def split_pair() -> None:
    raise ValueError("pair " + chr(0xD83D) + chr(0xDE00) + " split")


@app.task(retries=0)
def exits(code: int) -> None:
    sys.exit(code)


@app.task(retries=0)
def dies(code: int) -> None:
    os._exit(code)


@app.task(retries=0)
def abandons() -> None:
    raise Abandoned("abandoned by the task")


@app.task
def prints() -> str:
    print('{"status":"done","result":"from stdout","error":null,"terminal":false}')
    print("a NUL on stdout:", chr(0), "and 100,000 characters:", "p" * 100_000, flush=True)
    print(STDERR_LINE, file=sys.stderr, flush=True)
    return "printed"


@app.task(retries=0)
def reports(path: str) -> str:
    jobq.set_progress(PROGRESS["current"], PROGRESS["total"], PROGRESS["message"])
    deadline = time.monotonic() + WAIT_FOR_FILE
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_FOR_FILE} s")
        time.sleep(0.02)
    return "released"


@app.task(retries=0)
def first(x: int) -> dict[str, Any]:
    return {"x": x, "big": 2**70, "nul": "a" + chr(0) + "b", "nested": [[1.5, None], {"k": []}]}


@app.task(retries=0)
def second() -> dict[str, Any]:
    return {"parents": jobq.parent_results(), "pid": os.getpid()}
