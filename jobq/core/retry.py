"""Backoff policies: how long a failed task waits before its next attempt. No I/O but
the log line of a policy that fails (retry_delay)."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Protocol

from jobq.db.durations import MAX_SECONDS

log = logging.getLogger("jobq.retry")


class Backoff(Protocol):
    """A retry policy: any object with a ``delay(attempt)`` method is one.

    Give it as ``@app.task(backoff=...)`` (or ``jobq.Store(url, backoff=...)``). jobq's
    own are jobq.ExponentialBackoff (the default) and jobq.FixedBackoff.

    Example:
        ```python
        import jobq

        class Linear:
            def delay(self, attempt: int) -> float:
                return 10.0 * attempt  # 10 s, 20 s, 30 s...

        app = jobq.App()

        @app.task(retries=3, backoff=Linear())
        def fetch(url: str) -> None: ...
        ```
    """

    def delay(self, attempt: int) -> float:
        """Seconds to wait before the retry that follows failed attempt ``attempt`` (1 for
        the first run). A policy that raises, or returns anything but a number of seconds
        from 0 to 100 years, is logged (logger ``jobq.retry``) and the default's delay is
        used instead."""
        ...


@dataclass(frozen=True)
class ExponentialBackoff:
    """``base * factor ** (attempt - 1)`` seconds, capped at ``maximum``, with full jitter.

    Full jitter (a uniform draw in [delay * (1 - jitter), delay]) spreads the retries of
    tasks that failed together, so they do not return to the database in one wave. The
    default policy is ``ExponentialBackoff()``: about 1 s, 2 s, 4 s... up to an hour.

    Args:
        base: seconds before the first retry, before jitter.
        factor: what each further retry multiplies the delay by (>= 1).
        maximum: the longest delay, in seconds.
        jitter: the share of the delay drawn at random, from 0 (none) to 1.

    Raises:
        ValueError: a negative ``base`` or ``maximum``, a ``factor`` under 1, or a
            ``jitter`` outside [0, 1].

    Example:
        ```python
        import jobq

        backoff = jobq.ExponentialBackoff(base=2, maximum=600, jitter=0)
        assert [backoff.delay(n) for n in (1, 2, 3, 20)] == [2, 4, 8, 600]
        ```
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
        """Seconds before the retry after failed attempt ``attempt`` (1 for the first)."""
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a large attempt count cannot overflow a float.
        raw = self.base * self.factor ** min(exponent, 64)
        capped = min(raw, self.maximum)
        return capped * (1 - self.jitter * random.random())


@dataclass(frozen=True)
class FixedBackoff:
    """The same delay after every failure; ``backoff=30`` on a task means FixedBackoff(30).

    Args:
        seconds: the delay, from 0 to 100 years.

    Raises:
        ValueError: ``seconds`` out of that range, or not a number.

    Example:
        ```python
        import jobq

        app = jobq.App()

        @app.task(retries=5, backoff=jobq.FixedBackoff(30))
        def poll(url: str) -> None: ...

        assert jobq.FixedBackoff(30).delay(4) == 30
        ```
    """

    seconds: float = 1.0

    def __post_init__(self) -> None:
        if not _is_seconds(self.seconds):
            raise ValueError(
                f"FixedBackoff needs seconds from 0 to {MAX_SECONDS:g}, not {self.seconds!r}"
            )

    def delay(self, attempt: int) -> float:
        """``seconds``, whatever ``attempt``."""
        return self.seconds


#: The policy of a task given none, and the one a failing policy falls back to.
DEFAULT_BACKOFF = ExponentialBackoff()


def backoff_policy(task: str, value: object) -> Backoff:
    """The policy ``backoff=value`` of task ``task`` means: the default for None, a
    FixedBackoff of that many seconds for a number, and a policy (an object with a
    ``delay(attempt)`` method) as it is.

    Raises TypeError naming the task and the value for anything else (a class rather
    than an instance, say), and ValueError for a negative or infinite number.
    """
    if value is None:
        return DEFAULT_BACKOFF
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not _is_seconds(value):
            raise ValueError(
                f"task {task!r}: backoff={value!r} is not a number of seconds "
                f"from 0 to {MAX_SECONDS:g}"
            )
        return FixedBackoff(float(value))
    if isinstance(value, type) or not callable(getattr(value, "delay", None)):
        raise TypeError(
            f"task {task!r}: backoff={value!r} is not a backoff policy; give a number of "
            "seconds, an instance of jobq.FixedBackoff or jobq.ExponentialBackoff, or an "
            "object with a delay(attempt) method returning seconds"
        )
    return value  # type: ignore[return-value]  # it has a callable delay: a Backoff


def retry_delay(backoff: Backoff, attempt: int, *, whose: str) -> float:
    """The seconds ``backoff`` gives before the retry after failed attempt ``attempt``.

    Never raises: a policy that raises or returns no number of seconds (from 0 to
    MAX_SECONDS) is logged, an error naming ``whose`` policy it is ("task 'send'") and
    what went wrong, and the default policy's delay is used instead, so that the failure
    being recorded keeps its own error and its log line.
    """
    try:
        delay = backoff.delay(attempt)
        if _is_seconds(delay):
            return float(delay)
        problem = f"returned {delay!r}, not a number of seconds from 0 to {MAX_SECONDS:g}"
    except Exception as error:  # a user's policy: anything may go wrong in it
        problem = f"raised {type(error).__name__}: {error}"
    fallback = DEFAULT_BACKOFF.delay(attempt)
    log.error(
        "%s: backoff %r %s; retrying after the default backoff (%.3g s)",
        whose, backoff, problem, fallback,
    )  # fmt: skip
    return fallback


def _is_seconds(value: object) -> bool:
    """Whether ``value`` is a number (not a bool) from 0 to MAX_SECONDS (100 years)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return 0 <= value <= MAX_SECONDS  # False for NaN too
