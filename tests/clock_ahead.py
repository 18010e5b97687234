"""Runs `jobq ARGS` on a machine whose clock is SECONDS ahead of the database's:
``python -m tests.clock_ahead SECONDS ARGS...`` (``--now`` prints the shifted clock).

Everything the command uses is imported first; then every module's reference to
datetime.datetime becomes a subclass whose now(), utcnow() and today() are SECONDS ahead
(an instance check still accepts every datetime, so the drivers' values pass), and so do
time.time and time.time_ns. The database's clock is left alone: it runs elsewhere.
"""

from __future__ import annotations

import datetime as datetimes
import importlib
import sys
import time
from typing import Any

import jobq.cli

_REAL = datetimes.datetime
_REAL_TIME, _REAL_TIME_NS = time.time, time.time_ns


class _AcceptsEveryDatetime(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, _REAL)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _REAL)


def shift_clock(seconds: float) -> None:
    """Move this process's clock ``seconds`` ahead, as described above."""
    ahead = datetimes.timedelta(seconds=seconds)

    class Ahead(_REAL, metaclass=_AcceptsEveryDatetime):
        @classmethod
        def now(cls, tz: datetimes.tzinfo | None = None) -> _REAL:  # type: ignore[override]
            return _REAL.now(tz) + ahead

        @classmethod
        def utcnow(cls) -> _REAL:  # type: ignore[override]
            return _REAL.now(datetimes.UTC).replace(tzinfo=None) + ahead

        @classmethod
        def today(cls) -> _REAL:  # type: ignore[override]
            return cls.now()

    def time_ahead() -> float:
        return _REAL_TIME() + seconds

    def time_ns_ahead() -> int:
        return _REAL_TIME_NS() + int(seconds * 1e9)

    swaps = {id(_REAL): Ahead, id(_REAL_TIME): time_ahead, id(_REAL_TIME_NS): time_ns_ahead}
    this = sys.modules[__name__]
    for module in list(sys.modules.values()):
        if module is this:  # its own references stay the real ones
            continue
        names = getattr(module, "__dict__", {})
        for name, value in list(names.items()):
            if id(value) in swaps and any(
                value is real for real in (_REAL, _REAL_TIME, _REAL_TIME_NS)
            ):
                setattr(module, name, swaps[id(value)])


def main() -> None:
    seconds, *args = sys.argv[1:]
    for driver in ("sqlite3", "psycopg", "pymysql", "sqlalchemy.dialects.postgresql.psycopg"):
        importlib.import_module(driver)
    shift_clock(float(seconds))
    if args == ["--now"]:
        print(datetimes.datetime.now(datetimes.UTC).isoformat())
        return
    jobq.cli.main(args, prog_name="jobq")


if __name__ == "__main__":
    main()
