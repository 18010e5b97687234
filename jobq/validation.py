"""Checks of the options callers pass; each failure is an InvalidOption naming the option."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jobq.errors import InvalidOption

#: The longest name, queue, worker id or key that the schema stores.
MAX_KEY = 255


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


def check_int(option: str, value: Any, *, minimum: int | None = None) -> None:
    """An int (not a bool), at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(option=option, reason=f"{value!r} is not an integer")
    if minimum is not None and value < minimum:
        raise InvalidOption(option=option, reason=f"{value} is below {minimum}")


def check_seconds(option: str, value: Any, *, positive: bool = False) -> None:
    """A finite, non-negative (or ``positive``) number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidOption(option=option, reason=f"{value!r} is not a number of seconds")
    if value < 0 or (positive and value == 0):
        raise InvalidOption(
            option=option, reason=f"{value} must be {'positive' if positive else 'non-negative'}"
        )


def check_key(option: str, value: Any, *, required: bool = False) -> None:
    """A non-empty string the schema can store; None allowed unless ``required``."""
    if value is None and not required:
        return
    if not isinstance(value, str) or not value:
        raise InvalidOption(option=option, reason=f"{value!r} is not a non-empty string")
    if len(value) > MAX_KEY:
        raise InvalidOption(option=option, reason=f"longer than {MAX_KEY} characters")


def check_datetime(option: str, value: Any) -> None:
    """A datetime (naive ones are taken as UTC)."""
    if not isinstance(value, datetime):
        raise InvalidOption(option=option, reason=f"{value!r} is not a datetime")
