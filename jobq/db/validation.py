"""Checks of the options callers pass; each failure is an InvalidOption naming the option."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jobq.db.durations import MAX_SECONDS
from jobq.db.errors import InvalidOption

#: The longest name, queue, worker id or key that the schema stores.
MAX_KEY = 255

#: The range of the 32-bit integer columns (priority, retries) and of 64-bit ones (ids).
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


def queue_list(queues: Sequence[str] | str | None) -> list[str] | None:
    """``queues`` as a list (a single name is one queue); None means every queue."""
    if queues is None:
        return None
    if isinstance(queues, str):
        queues = [queues]
    queue_list = list(queues)
    for queue in queue_list:
        check_key("queues", queue, required=True)
    return queue_list


def shown(value: Any) -> str:
    """``repr(value)`` for messages; an int too long for that (over 4300 digits), by its size."""
    try:
        return repr(value)
    except ValueError:
        return f"<an integer of {value.bit_length()} bits>"


def check_int(option: str, value: Any, *, minimum: int = INT64[0], maximum: int = INT64[1]) -> None:
    """An int (not a bool) from ``minimum`` to ``maximum``: by default, what 64 bits hold."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(option=option, reason=f"{shown(value)} is not an integer")
    if value < minimum:
        raise InvalidOption(option=option, reason=f"{shown(value)} is below {minimum}")
    if value > maximum:
        raise InvalidOption(option=option, reason=f"{shown(value)} is above {maximum}")


def check_seconds(option: str, value: Any, *, positive: bool = False) -> None:
    """A finite, non-negative (or ``positive``) number of seconds, at most 100 years."""
    # Not math.isfinite() of an int: one past a float's range fails to convert.
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if isinstance(value, bool) or not finite:
        raise InvalidOption(option=option, reason=f"{shown(value)} is not a number of seconds")
    if value < 0 or (positive and value == 0):
        raise InvalidOption(
            option=option,
            reason=f"{shown(value)} must be {'positive' if positive else 'non-negative'}",
        )
    if value > MAX_SECONDS:
        # Added to the database's now, more would pass the last moment timestamps hold.
        reason = f"{shown(value)} is longer than the maximum of 100 years"
        raise InvalidOption(option=option, reason=reason)


def check_key(option: str, value: Any, *, required: bool = False) -> None:
    """A non-empty string the schema can store; None allowed unless ``required``."""
    if value is None and not required:
        return
    if not isinstance(value, str) or not value:
        raise InvalidOption(option=option, reason=f"{shown(value)} is not a non-empty string")
    if len(value) > MAX_KEY:
        raise InvalidOption(option=option, reason=f"longer than {MAX_KEY} characters")
    # PostgreSQL's text holds no NUL, and no driver sends a lone surrogate.
    if "\x00" in value:
        raise InvalidOption(option=option, reason=f"{shown(value)} contains a NUL character")
    if not value.isascii() and not is_unicode(value):
        raise InvalidOption(option=option, reason=f"{shown(value)} is not valid Unicode text")


def is_unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode: no lone surrogate (which UTF-8 cannot encode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_datetime(option: str, value: Any) -> None:
    """A datetime (naive ones are taken as UTC) that exists in UTC."""
    if not isinstance(value, datetime):
        raise InvalidOption(option=option, reason=f"{shown(value)} is not a datetime")
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            reason = f"{shown(value)} is out of range in UTC"
            raise InvalidOption(option=option, reason=reason) from None
