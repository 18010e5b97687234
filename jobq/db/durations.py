"""Durations as people write them on a command line: ``30s``, ``15m``, ``12h``, ``7d``, ``1w``.

parse_duration reads them into seconds, format_duration writes seconds back in the
same units. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re

#: Seconds per unit, largest first.
UNITS: dict[str, int] = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}

#: The longest duration accepted: databases store timestamps only so far from now
#: (SQLite's date functions stop at year 9999), and no queue needs more.
MAX_SECONDS = 100 * 365 * 86400

_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
_UNIT = f"[{''.join(UNITS)}]"
_PLAIN = re.compile(rf"\s*({_NUMBER})\s*")
_PARTS = re.compile(rf"(?:\s*{_NUMBER}\s*{_UNIT})+\s*", re.IGNORECASE)
_PART = re.compile(rf"({_NUMBER})\s*({_UNIT})", re.IGNORECASE)

_EXAMPLES = "a number of seconds or a duration such as 30s, 15m, 12h, 7d, 1w or 1h30m"


def parse_duration(value: str | float) -> float:
    """``value`` in seconds: a plain number of seconds, or number-unit parts added up.

    Units are s, m, h, d and w; parts may be combined (``1h30m``, ``2m 5s``). Raises
    ValueError saying what is wrong for anything else: text that is not a duration, a
    negative or non-finite number, or more than MAX_SECONDS (100 years).
    """
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; expected {_EXAMPLES}")
    if isinstance(value, int | float):
        # Compared before any float(): an int past a float's range fails to convert.
        if (isinstance(value, float) and not math.isfinite(value)) or value < 0:
            raise ValueError(f"{value!r} is not a non-negative number of seconds")
        seconds = value
    elif not isinstance(value, str):
        raise ValueError(f"{value!r} is not a duration; expected {_EXAMPLES}")
    elif plain := _PLAIN.fullmatch(value):
        seconds = float(plain.group(1))
    elif _PARTS.fullmatch(value):
        seconds = sum(float(n) * UNITS[unit.lower()] for n, unit in _PART.findall(value))
    else:
        raise ValueError(f"{value!r} is not a duration; expected {_EXAMPLES}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{value!r} is longer than the maximum of 100 years")
    return float(seconds)


def format_duration(seconds: float) -> str:
    """``seconds`` rounded down to its two largest units: ``2m 5s``, ``3h``, ``1d 4h``.

    Weeks are shown as days; anything under a second (or negative) is ``0s``.
    """
    remaining = max(int(seconds), 0)
    amounts: list[tuple[int, str]] = []
    for unit in ("d", "h", "m", "s"):
        amount, remaining = divmod(remaining, UNITS[unit])
        amounts.append((amount, unit))
    first = next((i for i, (amount, _) in enumerate(amounts) if amount), None)
    if first is None:
        return "0s"
    return " ".join(f"{amount}{unit}" for amount, unit in amounts[first : first + 2] if amount)
