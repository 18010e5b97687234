"""Cron expressions and their ticks, on croniter. Pure: no database, no clock of its own."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

from jobq.errors import InvalidOption
from jobq.validation import MAX_KEY

# croniter's aliases, as the five fields they stand for.
_ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}  # fmt: skip


@dataclass(frozen=True)
class Cron:
    """A croniter expression read in a timezone; ``next_after`` gives its ticks.

    Five fields (minute hour day month weekday), or six with seconds as the sixth, as
    croniter reads them: ``"* * * * * */10"`` is every ten seconds. Aliases such as
    ``@hourly`` work too. The timezone is an IANA name; ticks are computed in it (so
    ``0 9 * * *`` is 9 o'clock local time across daylight saving changes) and returned
    in UTC.
    """

    expression: str
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str) or not self.expression.strip():
            raise InvalidOption(option="cron", reason=f"{self.expression!r} is not a cron string")
        if len(self.expression) > MAX_KEY:
            raise InvalidOption(option="cron", reason=f"longer than {MAX_KEY} characters")
        if not croniter.is_valid(self.expression):
            raise InvalidOption(
                option="cron",
                reason=f"{self.expression!r} is not a valid cron expression (five fields, or "
                "six with seconds last, e.g. '*/5 * * * *' or '* * * * * */10'; croniter "
                "reads a seventh, the year, too)",
            )
        if self.next_after(datetime.now(UTC)) is None:
            raise InvalidOption(
                option="cron", reason=f"{self.expression!r} never fires (no date matches it)"
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
