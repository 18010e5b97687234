"""Cron expressions and their ticks, on croniter. Pure: no database, no clock of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobq.db.errors import InvalidOption
from jobq.db.validation import MAX_KEY

# croniter's aliases, as the five fields they stand for.
_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}  # fmt: skip

#: Each field croniter reads, in its order, with the values it takes: five fields, a sixth
#: (seconds, last) and a seventh (the year). Names are those of months and weekdays.
_FIELDS = (
    ("minute", 0, 59, ""), ("hour", 0, 23, ""), ("day", 1, 31, ""),
    ("month", 1, 12, " or jan-dec"), ("weekday", 0, 7, " or sun-sat"), ("second", 0, 59, ""),
    ("year", 1970, 2099, ""),
)  # fmt: skip
_FIELD_COUNTS = (5, 6, 7)
_EXPECTED = (
    "five fields (minute hour day month weekday), or six with seconds last, e.g. "
    "'*/5 * * * *' or '* * * * * */10' (croniter reads a seventh, the year, too), or an "
    f"alias: {', '.join(_ALIASES)}"
)
#: What '#' may follow in the weekday field: the nth such weekday of the month.
_NTH_WEEKDAY = (1, 5)


@dataclass(frozen=True)
class Cron:
    """A croniter expression read in a timezone; ``next_after`` gives its ticks.

    Five fields (minute hour day month weekday), or six with seconds as the sixth, as
    croniter reads them: ``"* * * * * */10"`` is every ten seconds. Aliases such as
    ``@hourly`` work too. The timezone is an IANA name; ticks are computed in it (so
    ``0 9 * * *`` is 9 o'clock local time across daylight saving changes) and returned
    in UTC. A bad expression raises InvalidOption saying which field is wrong and why.
    ``@app.periodic(cron=..., timezone=...)`` makes one.

    Example:
        ```python
        from datetime import UTC, datetime

        import jobq

        nine_in_paris = jobq.Cron("0 9 * * *", "Europe/Paris")
        tick = nine_in_paris.next_after(datetime(2026, 7, 1, tzinfo=UTC))
        assert tick == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)  # summer time: UTC+2
        ```
    """

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise InvalidOption(option="cron", reason=f"{self.expression!r} is not a cron string")
        if len(self.expression) > MAX_KEY:
            raise InvalidOption(option="cron", reason=f"longer than {MAX_KEY} characters")
        from croniter import croniter  # imported once a schedule is made: 10 ms

        if not croniter.is_valid(self.expression):
            reason = f"cron expression {self.expression!r}: {problem_of(self.expression)}"
            raise InvalidOption(option="cron", reason=reason)
        if self.next_after(datetime.now(UTC)) is None:
            raise InvalidOption(
                option="cron",
                reason=f"cron expression {self.expression!r} never fires (no date matches it)",
            )

    @property
    def zone(self) -> ZoneInfo:
        """The timezone, or InvalidOption naming it."""
        if not isinstance(self.timezone, str) or not self.timezone:
            raise InvalidOption(option="timezone", reason=f"{self.timezone!r} is not a timezone")
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: 'America', a directory
            raise InvalidOption(
                option="timezone",
                reason=f"unknown timezone {self.timezone!r} (expected an IANA name such as "
                "'UTC' or 'Europe/Paris')",
            ) from None

    def next_after(self, moment: datetime) -> datetime | None:
        """The first tick strictly after ``moment`` (naive means UTC), as an aware UTC
        datetime; None if there is none (a date that never comes, or a year gone by)."""
        from croniter import CroniterBadDateError, croniter

        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ticks: Any = croniter(self.expression, moment.astimezone(self.zone))
        try:
            tick: datetime = ticks.get_next(datetime)
            # The hour repeated when clocks go back: like cron, a job at fixed times runs
            # in its first pass only; jobs every so many minutes or hours run in both.
            while tick.fold == 1 and self._fixed_time:
                tick = ticks.get_next(datetime)
        except CroniterBadDateError:
            return None
        return tick.astimezone(UTC)

    @property
    def _fixed_time(self) -> bool:
        """Neither the minute nor the hour field is a wildcard (Vixie cron's rule)."""
        fields = _ALIASES.get(self.expression.strip().lower(), self.expression).split()
        return not (fields[0].startswith("*") or fields[1].startswith("*"))

    def __str__(self) -> str:
        return self.expression if self.timezone == "UTC" else f"{self.expression} ({self.timezone})"


def problem_of(expression: str) -> str:
    """What is wrong with ``expression``, which croniter refuses, naming the bad field.

    For instance "minute field '61' is out of range 0-59", "it has 4 fields; expected
    ...", or "unknown alias '@reboot' ...". Each field is tried alone among wildcards, so
    the first that croniter refuses on its own is the one named.
    """
    words = expression.split()
    if words and words[0].startswith("@"):
        alias = words[0]
        if alias.lower() not in _ALIASES:
            return f"unknown alias {alias!r} (expected one of {', '.join(_ALIASES)})"
        if len(words) > 1:
            return f"the alias {alias!r} takes no fields after it"
        return f"the alias {alias!r} takes no spaces around it"
    if len(words) not in _FIELD_COUNTS:
        return f"it has {len(words)} field{'' if len(words) == 1 else 's'}; expected {_EXPECTED}"
    from croniter import croniter

    for index, field in enumerate(words):
        alone = ["*"] * len(words)
        alone[index] = field
        if not croniter.is_valid(" ".join(alone)):
            return _field_problem(index, field)
    return f"its fields do not combine into a valid expression; expected {_EXPECTED}"


def _field_problem(index: int, field: str) -> str:
    """Why field number ``index`` (0: the minute) refuses ``field``."""
    name, low, high, names = _FIELDS[index]
    shown = f"{name} field {field!r}"
    for part in field.split(","):
        value, _, step = part.partition("/")
        if step.isdecimal() and int(step) == 0:
            return f"{shown} has a step of 0"
        value, hash_sign, nth = value.partition("#")
        first, last = _NTH_WEEKDAY
        if name == "weekday" and hash_sign and nth.isdecimal() and not first <= int(nth) <= last:
            return f"{shown}: the number after '#' (which such weekday) must be {first}-{last}"
        if any(not low <= int(n) <= high for n in re.findall(r"[0-9]+", value)):
            return f"{shown} is out of range {low}-{high}"
    return (
        f"{shown} is not valid (expected a value {low}-{high}{names}, '*', a range such as "
        "1-5, a list such as 1,3 or a step such as */5)"
    )
