"""Per-queue limits: how many tasks of a queue run at once, and how many start per period.

A Limit is stored in SQL (jobq_limits) whichever backend enforces it. The sql backend
(jobq.limits.sql) enforces it inside capture; the tigerbeetle backend
(jobq.limits.tigerbeetle, the optional extra) holds one TigerBeetle slot per running task.
This module is pure: the values and their parsing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from jobq.durations import format_duration, parse_duration
from jobq.errors import InvalidOption

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from jobq.store import Store
    from jobq.tasks import Task

__all__ = ["Limit", "Limiter", "Rate", "parse_rate"]

_RATE = re.compile(r"\s*(\d+)\s*/\s*(.+?)\s*")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``period`` seconds."""

    count: int
    period: float

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            reason = f"count {self.count!r} is not a positive integer"
            raise InvalidOption(option="rate", reason=reason)
        period = self.period
        if isinstance(period, bool) or not isinstance(period, int | float):
            reason = f"period {period!r} is not a number of seconds"
            raise InvalidOption(option="rate", reason=reason)
        if not math.isfinite(period) or period <= 0:
            raise InvalidOption(option="rate", reason=f"period {period!r} must be positive")

    def __str__(self) -> str:
        return f"{self.count}/{_format_period(self.period)}"


def parse_rate(value: str | Rate) -> Rate:
    """``value`` such as ``10/2s``, ``100/1m`` or ``5/s`` as a Rate; InvalidOption if not one."""
    if isinstance(value, Rate):
        return value
    if not isinstance(value, str) or not (match := _RATE.fullmatch(value)):
        raise InvalidOption(
            option="rate", reason=f"{value!r} is not N/PERIOD, such as 10/2s or 100/1m"
        )
    count, period = match.groups()
    if period[0].isalpha():
        period = "1" + period  # "5/s" reads as five per second
    try:
        seconds = parse_duration(period)
    except ValueError as error:
        raise InvalidOption(option="rate", reason=f"{value!r}: {error}") from None
    return Rate(int(count), seconds)


@dataclass(frozen=True)
class Limit:
    """A queue's limits: ``concurrency`` tasks at once and/or ``rate`` starts per period.

    ``generation`` identifies this setting; every change draws a new one.
    """

    queue: str
    concurrency: int | None = None
    rate: Rate | None = None
    generation: int = 0

    def __post_init__(self) -> None:
        if self.concurrency is not None and (
            isinstance(self.concurrency, bool)
            or not isinstance(self.concurrency, int)
            or self.concurrency < 1
        ):
            raise InvalidOption(
                option="concurrency", reason=f"{self.concurrency!r} is not a positive integer"
            )
        if self.concurrency is None and self.rate is None:
            raise InvalidOption(
                option="limit", reason=f"queue {self.queue!r}: give a concurrency, a rate, or both"
            )

    def __str__(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.rate is not None:
            parts.append(f"rate {self.rate}")
        return ", ".join(parts)


class Limiter(Protocol):
    """Captures from limited queues, never more than their limits allow.

    The Store captures unlimited queues itself; for the queues in ``limited`` it asks its
    limiter. A limiter that holds something per run (a TigerBeetle slot) gives it back in
    ``release`` and keeps it alive in ``renew``.
    """

    def capture(
        self,
        store: Store,
        limited: Mapping[str, Limit],
        wanted: int,
        *,
        worker_id: str,
        lease: float | None,
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks from the queues of ``limited``, within their limits."""
        ...

    def release(self, fences: Iterable[tuple[int, int]]) -> None:
        """The runs ``fences`` (id, attempt) ended: free what they held."""
        ...

    def renew(self, runs: Iterable[tuple[tuple[int, int], float]]) -> None:
        """Keep what the runs (fence, lease seconds) hold for another lease."""
        ...


def _format_period(seconds: float) -> str:
    if seconds < 1 or seconds != int(seconds):
        return f"{seconds:g}s"
    return format_duration(seconds).replace(" ", "")
