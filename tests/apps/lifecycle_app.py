"""A test app whose tasks end every way a waiter must tell apart: done, failed, timed out,
and done with a large, awkward JSON result.

Its database URL comes from $JOBQ_DATABASE_URL, as a deployed worker's would.
"""

from __future__ import annotations

import time
from typing import Any

import jobq

app = jobq.App()


@app.task(retries=0)
def add(a: int, b: int) -> int:
    return a + b


@app.task(retries=0)
def boom(message: str) -> None:
    """Fails at once, for good (no retry)."""
    raise ValueError(message)


#: slow's timeout: its runs overrun it, and fail "timed out" once their code returns.
SLOW_TIMEOUT = 0.2


@app.task(retries=0, timeout=SLOW_TIMEOUT)
def slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def odd_value(size: int) -> dict[str, Any]:
    """A result JSON can hold that is large and awkward: deep, wide, non-ASCII."""
    deep: Any = "bottom"
    for _ in range(25):  # jobq stores up to 31 levels of nesting
        deep = [deep]
    return {
        "text": '\u00e9t\u00e9 \u2713 \U0001d11e \u65e5\u672c "quoted" back\\slash\nnew line',
        "big int": 2**62,
        "negative": -(2**53),
        "float": 1.5e300,
        "tiny": 5e-324,
        "nothing": None,
        "flags": [True, False],
        "empty": {"list": [], "object": {}, "string": ""},
        "deep": deep,
        "many": list(range(size)),
        "long": "x" * size,
    }


@app.task(retries=0)
def odd(size: int) -> dict[str, Any]:
    return odd_value(size)
