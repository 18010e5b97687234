"""Cron expressions and their ticks, and app.periodic's checks at decoration. No database."""

from __future__ import annotations

import datetime as dt
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import jobq
from jobq import Cron
from jobq.cron.periodic import Schedule

PARIS = "Europe/Paris"


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def ticks(cron: Cron, start: datetime, count: int) -> list[datetime]:
    """The ``count`` ticks after ``start``, each found from the one before."""
    found = []
    for _ in range(count):
        start = cron.next_after(start)
        found.append(start)
    return found


# --- Cron: validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression",
    ["", "   ", "not a cron", "* * * *", "61 * * * *", "* 24 * * *", "*/0 * * * *", "@reboot"],
)
def test_a_bad_expression_is_refused_naming_cron(expression: str) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron(expression)
    assert caught.value.context["option"] == "cron"


#: Fields of five-field expressions, of six with seconds last, of croniter's seventh (the
#: year), and aliases: each bad expression with what its error must say after its quote.
BAD_FIELDS = [
    ("61 * * * *", "minute field '61' is out of range 0-59"),
    ("1-61 * * * *", "minute field '1-61' is out of range 0-59"),
    ("5,60-70/2 * * * *", "minute field '5,60-70/2' is out of range 0-59"),
    ("* 24 * * *", "hour field '24' is out of range 0-23"),
    ("* * 0 * *", "day field '0' is out of range 1-31"),
    ("* * 32W * *", "day field '32W' is out of range 1-31"),
    ("* * * 13 *", "month field '13' is out of range 1-12"),
    ("* * * * 8", "weekday field '8' is out of range 0-7"),
    ("* * * * 1#6", "weekday field '1#6': the number after '#' (which such weekday) must be 1-5"),
    ("*/0 * * * *", "minute field '*/0' has a step of 0"),
    ("* 1-5/0 * * *", "hour field '1-5/0' has a step of 0"),
    ("* * * * * 60", "second field '60' is out of range 0-59"),
    ("0 * * * * */0", "second field '*/0' has a step of 0"),
    ("61 * * * * 30", "minute field '61' is out of range 0-59"),  # seconds last, not first
    ("* * * * * * 2200", "year field '2200' is out of range 1970-2099"),
    ("x * * * *", "minute field 'x' is not valid (expected a value 0-59, '*', a range such as "
                  "1-5, a list such as 1,3 or a step such as */5)"),
    ("* * * foo *", "month field 'foo' is not valid (expected a value 1-12 or jan-dec, '*', a "
                    "range such as 1-5, a list such as 1,3 or a step such as */5)"),
    ("* * * * funday", "weekday field 'funday' is not valid (expected a value 0-7 or sun-sat, "
                       "'*', a range such as 1-5, a list such as 1,3 or a step such as */5)"),
    ("1,,2 * * * *", "minute field '1,,2' is not valid"),
    ("@reboot", "unknown alias '@reboot' (expected one of @yearly, @annually, @monthly, "
                "@weekly, @daily, @midnight, @hourly)"),
    ("@hourly 30", "the alias '@hourly' takes no fields after it"),
    ("* * * *", "it has 4 fields; expected five fields (minute hour day month weekday), or "
                "six with seconds last"),
    ("not a cron", "it has 3 fields; expected five fields"),
    ("* * * * * * * *", "it has 8 fields; expected"),
]  # fmt: skip


@pytest.mark.parametrize(("expression", "says"), BAD_FIELDS, ids=[e for e, _ in BAD_FIELDS])
def test_the_error_of_a_bad_expression_names_the_bad_field(expression: str, says: str) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron(expression)
    assert caught.value.context["option"] == "cron"
    message = str(caught.value)
    assert message.startswith(f"Option 'cron' is invalid: cron expression {expression!r}: ")
    assert message.split(f"{expression!r}: ", 1)[1].startswith(says), message


def test_the_error_names_the_first_bad_field_of_several() -> None:
    with pytest.raises(jobq.InvalidOption, match="'61 24 \\* \\* \\*': minute field '61'"):
        Cron("61 24 * * *")


@pytest.mark.parametrize("expression", [None, 5, ["*"] * 5])
def test_an_expression_that_is_not_a_string_is_refused_naming_cron(expression: Any) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron(expression)
    assert caught.value.context["option"] == "cron"
    assert "is not a cron string" in str(caught.value)


def test_an_expression_longer_than_the_schema_stores_is_refused() -> None:
    expression = "0 0 * * " + ",".join(["1"] * 200)
    assert len(expression) > 255
    with pytest.raises(jobq.InvalidOption, match="longer than 255") as caught:
        Cron(expression)
    assert caught.value.context["option"] == "cron"


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4 *"])
def test_an_expression_that_never_fires_is_refused_at_construction(expression: str) -> None:
    """February 30th and April 31st never come: the mistake must show at decoration, as
    InvalidOption, not as croniter's error when a worker computes the first tick."""
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron(expression)
    assert caught.value.context["option"] == "cron"


def test_an_expression_whose_last_year_is_gone_is_refused() -> None:
    with pytest.raises(jobq.InvalidOption, match="never fires") as caught:
        Cron("0 0 1 1 * 0 2020")  # croniter's seventh field is the year
    assert caught.value.context["option"] == "cron"


@pytest.mark.parametrize("timezone", ["Mars/Olympus_Mons", "", None, "../etc/passwd", 3])
def test_a_bad_timezone_is_refused_naming_timezone(timezone: Any) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron("* * * * *", timezone)
    assert caught.value.context["option"] == "timezone"


def test_the_expression_is_checked_before_the_timezone() -> None:
    with pytest.raises(jobq.InvalidOption) as caught:
        Cron("nonsense", "Mars/Olympus_Mons")
    assert caught.value.context["option"] == "cron"


def test_a_cron_is_a_value_and_prints_its_timezone_unless_utc() -> None:
    assert Cron("*/5 * * * *") == Cron("*/5 * * * *", "UTC")
    assert Cron("*/5 * * * *") != Cron("*/5 * * * *", PARIS)
    assert str(Cron("*/5 * * * *")) == "*/5 * * * *"
    assert str(Cron("0 9 * * *", PARIS)) == "0 9 * * * (Europe/Paris)"
    assert Cron("0 9 * * *", PARIS).zone.key == PARIS


# --- Cron: ticks -----------------------------------------------------------------------


def test_five_fields_tick_on_minutes() -> None:
    cron = Cron("*/5 * * * *")
    assert cron.next_after(utc(2024, 1, 1, 12, 3, 17)) == utc(2024, 1, 1, 12, 5)
    assert ticks(cron, utc(2024, 1, 1, 23, 50), 3) == [
        utc(2024, 1, 1, 23, 55), utc(2024, 1, 2, 0, 0), utc(2024, 1, 2, 0, 5),
    ]  # fmt: skip


def test_six_fields_take_seconds_last() -> None:
    every_ten = Cron("* * * * * */10")
    assert ticks(every_ten, utc(2024, 1, 1, 12, 0, 3), 4) == [
        utc(2024, 1, 1, 12, 0, 10), utc(2024, 1, 1, 12, 0, 20),
        utc(2024, 1, 1, 12, 0, 30), utc(2024, 1, 1, 12, 0, 40),
    ]  # fmt: skip
    # Minute 0, second 30: the first field is the minute, the sixth the second.
    half_past_the_hour_start = Cron("0 * * * * 30")
    assert ticks(half_past_the_hour_start, utc(2024, 1, 1, 12, 0, 10), 2) == [
        utc(2024, 1, 1, 12, 0, 30), utc(2024, 1, 1, 13, 0, 30),
    ]  # fmt: skip


def test_aliases_tick_like_their_expressions() -> None:
    assert Cron("@hourly").next_after(utc(2024, 1, 1, 12, 0, 0, 1)) == utc(2024, 1, 1, 13)
    assert Cron("@daily").next_after(utc(2024, 1, 1, 12)) == utc(2024, 1, 2)
    # An hour-long alias read in a zone half an hour off UTC ticks on its local hours.
    assert Cron("@hourly", "Asia/Kolkata").next_after(utc(2024, 1, 1, 12, 0, 1)) == utc(
        2024, 1, 1, 12, 30
    )


def test_next_after_is_strictly_after_a_moment_on_a_tick() -> None:
    assert Cron("*/5 * * * *").next_after(utc(2024, 1, 1, 12, 5)) == utc(2024, 1, 1, 12, 10)
    assert Cron("* * * * * */10").next_after(utc(2024, 1, 1, 12, 0, 10)) == utc(
        2024, 1, 1, 12, 0, 20
    )
    assert Cron("@hourly").next_after(utc(2024, 1, 1, 12)) == utc(2024, 1, 1, 13)


def test_fractions_of_a_second_before_a_tick_still_give_that_tick() -> None:
    just_before = utc(2024, 1, 1, 12, 4, 59, 999_999)
    assert Cron("*/5 * * * *").next_after(just_before) == utc(2024, 1, 1, 12, 5)
    assert Cron("* * * * * */10").next_after(utc(2024, 1, 1, 12, 0, 9, 999_999)) == utc(
        2024, 1, 1, 12, 0, 10
    )
    assert Cron("* * * * * */10").next_after(utc(2024, 1, 1, 12, 0, 10, 1)) == utc(
        2024, 1, 1, 12, 0, 20
    )


def test_next_after_is_none_once_no_tick_is_left() -> None:
    """A year-limited expression runs out of ticks: None after the last, not an error."""
    once = Cron("0 0 1 1 * 0 2050")
    assert once.next_after(utc(2049, 6, 1)) == utc(2050, 1, 1)
    assert once.next_after(utc(2050, 1, 1)) is None
    assert once.next_after(utc(2051, 1, 1)) is None


def test_naive_moments_are_utc_and_ticks_are_aware_utc() -> None:
    cron = Cron("0 9 * * *", PARIS)
    naive = datetime(2024, 1, 15, 7, 59)
    tick = cron.next_after(naive)
    assert tick == cron.next_after(naive.replace(tzinfo=UTC)) == utc(2024, 1, 15, 8)
    assert tick.tzinfo is UTC
    assert tick.utcoffset() == timedelta(0)


def test_moments_in_other_zones_are_the_same_instants() -> None:
    cron = Cron("0 0 * * *")
    plus_five = dt.timezone(timedelta(hours=5))
    # 2024-01-01 03:00 at UTC+5 is 2023-12-31 22:00 UTC: midnight UTC comes two hours later.
    assert cron.next_after(datetime(2024, 1, 1, 3, tzinfo=plus_five)) == utc(2024, 1, 1)


def test_ticks_follow_local_time_across_daylight_saving() -> None:
    """9 o'clock in Paris is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST)."""
    nine = Cron("0 9 * * *", PARIS)
    assert nine.next_after(utc(2024, 1, 15)) == utc(2024, 1, 15, 8)
    assert nine.next_after(utc(2024, 7, 15)) == utc(2024, 7, 15, 7)
    # Spring forward (31 March 2024): 23 hours between the two nine o'clocks.
    assert ticks(nine, utc(2024, 3, 30), 3) == [
        utc(2024, 3, 30, 8), utc(2024, 3, 31, 7), utc(2024, 4, 1, 7),
    ]  # fmt: skip
    # Fall back (27 October 2024): 25 hours.
    assert ticks(nine, utc(2024, 10, 26), 3) == [
        utc(2024, 10, 26, 7), utc(2024, 10, 27, 8), utc(2024, 10, 28, 8),
    ]  # fmt: skip


def test_intervals_keep_real_time_across_the_fall_back_hour() -> None:
    """Every half hour stays every half hour while Paris lives 02:00-03:00 twice."""
    half_hours = ticks(Cron("*/30 * * * *", PARIS), utc(2024, 10, 26, 23, 59), 6)
    assert half_hours == [utc(2024, 10, 27, 0, 0) + timedelta(minutes=30 * i) for i in range(6)]


def test_a_daily_local_time_runs_once_on_the_fall_back_night() -> None:
    """'30 2 * * *' in Paris is one run a day. On 27 October 2024 local 02:30 happens twice
    (00:30 UTC in CEST, 01:30 UTC in CET); cron runs a fixed-time job once, not twice."""
    daily = ticks(Cron("30 2 * * *", PARIS), utc(2024, 10, 25, 12), 3)
    assert daily[0] == utc(2024, 10, 26, 0, 30)  # CEST
    assert daily[1] == utc(2024, 10, 27, 0, 30)  # the first 02:30 of the night
    assert daily[2] == utc(2024, 10, 28, 1, 30), f"ran twice on 27 October: {daily}"


def test_a_local_time_skipped_by_spring_forward_still_runs_that_day() -> None:
    """02:30 does not exist in Paris on 31 March 2024: that day's run comes just after the
    jump (03:00 CEST, 01:00 UTC), and it is one run."""
    daily = ticks(Cron("30 2 * * *", PARIS), utc(2024, 3, 30, 12), 2)
    assert daily == [utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 30)]


# --- app.periodic ----------------------------------------------------------------------


@pytest.fixture
def app() -> jobq.App:
    # Nothing here touches the database: the URL is never opened.
    return jobq.App("sqlite:///never-opened.db")


def test_periodic_on_a_plain_function_registers_it_as_a_task(app: jobq.App) -> None:
    @app.periodic(cron="*/5 * * * *")
    def sweep() -> str:
        return "swept"

    assert isinstance(sweep, jobq.TaskFunction)
    assert sweep() == "swept"
    definition = app.definition("sweep")
    assert (definition.queue, definition.retries, definition.lease) == ("default", 3, 30.0)
    assert app.schedules == {
        "sweep": Schedule(
            name="sweep", cron=Cron("*/5 * * * *"), task="sweep", queue="default", args={},
            retries=3, priority=0, lease=30.0, timeout=None, lock_key=None,
        )
    }  # fmt: skip


def test_periodic_stacked_on_a_task_takes_its_options(app: jobq.App) -> None:
    @app.periodic(cron="0 9 * * *", timezone=PARIS, kwargs={"region": "eu"})
    @app.task(queue="reports", retries=5, priority=7, lease=90, timeout=60, lock="report:{region}")
    def report(region: str, verbose: bool = False) -> None: ...

    assert isinstance(report, jobq.TaskFunction) and report.name == "report"
    (schedule,) = app.schedules.values()
    assert schedule == Schedule(
        name="report", cron=Cron("0 9 * * *", PARIS), task="report", queue="reports",
        args={"region": "eu"}, retries=5, priority=7, lease=90.0, timeout=60,
        lock_key="report:eu",
    )  # fmt: skip
    assert schedule.task_values() == {
        "name": "report", "queue_id": "reports", "args": {"region": "eu"}, "priority": 7,
        "lease": 90.0, "timeout": 60, "lock_key": "report:eu",
    }  # fmt: skip


def test_a_task_can_have_several_named_schedules_on_other_queues(app: jobq.App) -> None:
    @app.periodic(cron="0 * * * *", name="sync-eu", queue="eu", kwargs={"region": "eu"})
    @app.periodic(cron="30 * * * *", name="sync-us", kwargs={"region": "us"})
    @app.task(name="sync", queue="sync")
    def sync_region(region: str) -> None: ...

    assert sorted(app.schedules) == ["sync-eu", "sync-us"]
    eu, us = app.schedules["sync-eu"], app.schedules["sync-us"]
    assert (eu.task, eu.queue, eu.args, eu.cron.expression) == (
        "sync", "eu", {"region": "eu"}, "0 * * * *",
    )  # fmt: skip
    assert (us.task, us.queue, us.args, us.cron.expression) == (
        "sync", "sync", {"region": "us"}, "30 * * * *",
    )  # fmt: skip
    assert len(app.registry) == 1


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": "*/5 * * * *", "timezone": "Nowhere/Special"}, "timezone"),
        ({"cron": "*/5 * * * *", "timezone": ""}, "timezone"),
    ],
)
def test_a_bad_cron_or_timezone_fails_at_decoration(
    app: jobq.App, options: dict[str, Any], option: str
) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:

        @app.periodic(**options)
        def tick() -> None: ...

    assert caught.value.context["option"] == option
    assert app.schedules == {}
    assert "tick" not in app.registry


def test_a_bad_field_is_named_at_decoration(app: jobq.App) -> None:
    with pytest.raises(jobq.InvalidOption) as caught:

        @app.periodic(cron="0 * * * * 75")  # seconds last: 75 is the sixth field's
        def tick() -> None: ...

    assert str(caught.value) == (
        "Option 'cron' is invalid: cron expression '0 * * * * 75': second field '75' is out "
        "of range 0-59"
    )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "missing a required argument: 'day'"),
        ({"day": "mon", "hour": 9}, "unexpected keyword argument 'hour'"),
        ({"day": dt.date(2024, 1, 1)}, "'day'"),
        ({"day": float("nan")}, "'day'"),
        ({1: "mon"}, "must be strings"),
    ],
)
def test_kwargs_that_do_not_fit_the_task_fail_at_decoration(
    app: jobq.App, kwargs: dict[Any, Any], fragment: str
) -> None:
    @app.task(queue="q")
    def plan(day: str) -> None: ...

    with pytest.raises(jobq.InvalidTaskArguments, match=fragment) as caught:
        app.periodic(cron="0 0 * * *", kwargs=kwargs)(plan)
    assert "plan" in str(caught.value)
    assert app.schedules == {}


def test_kwargs_of_a_plain_function_are_checked_too(app: jobq.App) -> None:
    with pytest.raises(jobq.InvalidTaskArguments, match="unexpected keyword argument 'x'"):

        @app.periodic(cron="0 0 * * *", kwargs={"x": 1})
        def tidy() -> None: ...

    assert app.schedules == {}


def test_a_second_schedule_of_the_same_name_fails(app: jobq.App) -> None:
    @app.periodic(cron="0 0 * * *")
    @app.task
    def nightly(full: bool = False) -> None: ...

    first = app.schedules["nightly"]
    with pytest.raises(jobq.InvalidOption, match="already defined") as caught:
        app.periodic(cron="0 12 * * *", kwargs={"full": True})(nightly)
    assert caught.value.context["option"] == "name"
    assert app.schedules == {"nightly": first}

    # Another task, with the schedule name taken explicitly.
    with pytest.raises(jobq.InvalidOption, match="already defined"):

        @app.periodic(cron="0 1 * * *", name="nightly")
        def other() -> None: ...

    assert app.schedules == {"nightly": first}
    # Given a name of its own, the second schedule of the task is fine.
    app.periodic(cron="0 12 * * *", name="midday", kwargs={"full": True})(nightly)
    assert app.schedules["midday"].args == {"full": True}
    assert app.schedules["nightly"] == first


def test_a_lock_template_needing_a_missing_argument_fails_at_decoration(app: jobq.App) -> None:
    """The argument has a default, so the signature binds; the lock key cannot be formatted."""

    @app.task(lock="ledger:{account}")
    def settle(account: str = "main") -> None: ...

    with pytest.raises(jobq.InvalidTaskArguments, match="needs argument 'account'"):
        app.periodic(cron="0 0 * * *")(settle)
    assert app.schedules == {}
    app.periodic(cron="0 0 * * *", kwargs={"account": "main"})(settle)
    assert app.schedules["settle"].lock_key == "ledger:main"


@pytest.mark.parametrize(
    ("options", "option"),
    [({"name": "n" * 256}, "name"), ({"queue": ""}, "queue"), ({"queue": "q" * 256}, "queue")],
)
def test_a_bad_name_or_queue_fails_at_decoration(
    app: jobq.App, options: dict[str, Any], option: str
) -> None:
    @app.task
    def job() -> None: ...

    with pytest.raises(jobq.InvalidOption) as caught:
        app.periodic(cron="0 0 * * *", **options)(job)
    assert caught.value.context["option"] == option
    assert app.schedules == {}


def test_a_task_of_another_app_is_refused(app: jobq.App) -> None:
    other = jobq.App("sqlite:///never-opened-either.db")

    @other.task
    def foreign() -> None: ...

    with pytest.raises(jobq.InvalidOption, match="belongs to another app") as caught:
        app.periodic(cron="0 0 * * *")(foreign)
    assert caught.value.context["option"] == "periodic"
    assert app.schedules == {} and other.schedules == {}
