"""Backoff policies: how long a failed task waits before its next attempt. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol


class Backoff(Protocol):
    """A retry policy: the delay in seconds before retrying after failed attempt ``attempt``."""

    def delay(self, attempt: int) -> float: ...


@dataclass(frozen=True)
class ExponentialBackoff:
    """``base * factor ** (attempt - 1)`` seconds, capped at ``maximum``, with full jitter.

    Full jitter (a uniform draw in [delay * (1 - jitter), delay]) spreads the retries of
    tasks that failed together, so they do not return to the database in one wave.
    """

    base: float = 1.0
    factor: float = 2.0
    maximum: float = 3600.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base < 0 or self.maximum < 0 or self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError(
                "ExponentialBackoff needs base >= 0, factor >= 1, maximum >= 0 and 0 <= jitter <= 1"
            )

    def delay(self, attempt: int) -> float:
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a large attempt count cannot overflow a float.
        raw = self.base * self.factor ** min(exponent, 64)
        capped = min(raw, self.maximum)
        return capped * (1 - self.jitter * random.random())


@dataclass(frozen=True)
class FixedBackoff:
    """The same delay after every failure."""

    seconds: float = 1.0

    def delay(self, attempt: int) -> float:
        return self.seconds
