"""Per-queue limits: how many tasks of a queue run at once, and how many start per period.

A Limit is stored in SQL (jobq_limits) whichever backend enforces it. The sql backend
(jobq.limits.sql) enforces it inside capture; the tigerbeetle backend
(jobq.limits.tigerbeetle, the optional extra) holds one TigerBeetle slot per running task.
A capability: the store's Limits (``store.queue_limits``) is its capture filter
(jobq.core.hooks), and pause.py pauses queues (``store.pauses``). This module is pure: the
values, their parsing, and the Limiter protocol.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from jobq.db.durations import MAX_SECONDS, UNITS, parse_duration
from jobq.db.errors import InvalidOption
from jobq.db.validation import shown

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from jobq.db.tasks import Leases, Task

__all__ = ["FairShare", "Limit", "LimitedQueues", "Limiter", "Rate", "parse_rate"]

#: The largest count or concurrency: the columns are 32-bit integers.
MAX_COUNT = 2**31 - 1

_RATE = re.compile(r"\s*(\d+)\s*/\s*(.+?)\s*")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``period`` seconds."""

    count: int
    period: float

    def __post_init__(self) -> None:
        check_count("rate", self.count, "count ")
        period = self.period
        if isinstance(period, bool) or not isinstance(period, int | float):
            reason = f"period {shown(period)} is not a number of seconds"
            raise InvalidOption(option="rate", reason=reason)
        if (isinstance(period, float) and not math.isfinite(period)) or period <= 0:
            raise InvalidOption(option="rate", reason=f"period {shown(period)} must be positive")
        if period > MAX_SECONDS:
            reason = f"period {shown(period)} is longer than the maximum of 100 years"
            raise InvalidOption(option="rate", reason=reason)

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
    try:
        # "5/s" reads as five per second.
        seconds = parse_duration("1" + period if period[0].isalpha() else period)
    except ValueError as error:
        problem = (
            "is longer than the maximum of 100 years"
            if "longer than" in str(error)
            else "is not a duration such as 2s, 1m or 1h30m"
        )
        reason = f"{value!r}: the period {period!r} {problem}"
        raise InvalidOption(option="rate", reason=reason) from None
    try:
        number = int(count)
    except ValueError:  # more digits than int() reads (4300): far above the maximum
        reason = f"count {count[:10]}... ({len(count)} digits) is above the maximum of {MAX_COUNT}"
        raise InvalidOption(option="rate", reason=reason) from None
    return Rate(number, seconds)


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
        if self.concurrency is not None:
            check_count("concurrency", self.concurrency)
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


@dataclass(frozen=True)
class FairShare:
    """How a fair queue shares its captures between fair keys (jobq.limits.fair): a key
    without a weight of its own has ``default_weight``; at most ``max_running_per_key``
    runs of one key at once (None: no cap)."""

    queue: str
    default_weight: int = 1
    max_running_per_key: int | None = None

    def __post_init__(self) -> None:
        check_count("default_weight", self.default_weight)
        if self.max_running_per_key is not None:
            check_count("max_running_per_key", self.max_running_per_key)

    def __str__(self) -> str:
        parts = [f"fair, default weight {self.default_weight}"]
        if self.max_running_per_key is not None:
            parts.append(f"at most {self.max_running_per_key} running per key")
        return ", ".join(parts)


class LimitedQueues(Protocol):
    """What a limiter may ask of the limits of a store (jobq.limits.sql.Limits)."""

    def limits(self) -> dict[str, Limit]:
        """Every queue's limit, as stored now."""
        ...

    def capture_within_limit(
        self, queue: str, wanted: int, *, worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks of ``queue``, within its limit."""
        ...

    def capture_from_limited_queue(
        self, queue: str, wanted: int, *, worker_id: str, lease: float | Leases | None
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks of ``queue``, its limit enforced elsewhere."""
        ...


class Limiter(Protocol):
    """Captures from limited queues, never more than their limits allow.

    The Store captures unlimited queues itself; for the queues in ``limited`` it asks its
    limiter, through the limits (``store``, the capture filter of jobq.core.hooks). A
    limiter that holds something per run (a TigerBeetle slot) gives it back in ``release``
    and keeps it alive in ``renew``.
    """

    def capture(
        self,
        store: LimitedQueues,
        limited: Mapping[str, Limit],
        wanted: int,
        *,
        worker_id: str,
        lease: float | Leases | None,
    ) -> list[Task]:
        """Capture at most ``wanted`` tasks from the queues of ``limited``, within their limits."""
        ...

    def release(self, fences: Iterable[tuple[int, int]]) -> None:
        """The runs ``fences`` (id, attempt) ended: free what they held."""
        ...

    def renew(self, runs: Iterable[tuple[tuple[int, int], float]]) -> None:
        """Keep what the runs (fence, lease seconds) hold for another lease."""
        ...

    def close(self) -> None:
        """Give back what is held, and let go of any connection."""
        ...


def check_count(option: str, value: object, label: str = "") -> None:
    """A positive integer that the database's 32-bit columns can store."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(
            option=option, reason=f"{label}{shown(value)} is not a positive integer"
        )
    if value > MAX_COUNT:
        reason = f"{label}{shown(value)} is above the maximum of {MAX_COUNT}"
        raise InvalidOption(option=option, reason=reason)


def _format_period(seconds: float) -> str:
    """``seconds`` exactly, in the units parse_rate reads: ``2s``, ``1h30m15s``, ``0.5s``."""
    if seconds != int(seconds):
        # The shortest decimal that reads back as the same float, never in E notation.
        return f"{Decimal(repr(float(seconds))):f}s"
    parts, remaining = [], int(seconds)
    for unit in ("d", "h", "m", "s"):
        amount, remaining = divmod(remaining, UNITS[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)
