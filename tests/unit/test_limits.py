"""Per-queue limit values: parse_rate, Rate and Limit, their checks and their text. No database."""

from __future__ import annotations

import math
from typing import Any

import pytest

import jobq
from jobq.db.durations import MAX_SECONDS
from jobq.limits import Limit, Rate, parse_rate


def reason(raised: pytest.ExceptionInfo[jobq.InvalidOption]) -> str:
    """The reason an InvalidOption gives (its message without "Option ... is invalid: ")."""
    return str(raised.value.context["reason"])


# --- parse_rate: what it accepts ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "period"),
    [
        ("10/2s", 10, 2.0),
        ("100/1m", 100, 60.0),
        ("5/s", 5, 1.0),  # a bare unit is one of it
        ("7/m", 7, 60.0),
        ("2/h", 2, 3600.0),
        ("3/1h30m", 3, 5400.0),
        ("10/0.5", 10, 0.5),  # a plain number is seconds
        ("10/90", 10, 90.0),
        ("4/1.5s", 4, 1.5),
        ("1/1w", 1, 604800.0),
        ("1/1d", 1, 86400.0),
        ("6/2m 5s", 6, 125.0),
        (" 10 / 2s ", 10, 2.0),  # spaces around the parts
        ("10/2S", 10, 2.0),  # units in either case
    ],
)
def test_parse_rate_reads_count_and_period(text: str, count: int, period: float) -> None:
    rate = parse_rate(text)
    assert rate == Rate(count, period)
    assert (type(rate.count), rate.count, rate.period) == (int, count, period)


def test_parse_rate_returns_a_rate_as_it_is() -> None:
    rate = Rate(3, 2.0)
    assert parse_rate(rate) is rate


def test_parse_rate_accepts_the_longest_duration() -> None:
    assert parse_rate("1/5200w").period == 5200 * 604800 <= MAX_SECONDS


# --- parse_rate: what it refuses, and why ----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("", "is not N/PERIOD"),
        ("   ", "is not N/PERIOD"),
        ("10", "is not N/PERIOD"),
        ("10/", "is not N/PERIOD"),
        ("/2s", "is not N/PERIOD"),
        ("abc/2s", "is not N/PERIOD"),
        ("-1/2s", "is not N/PERIOD"),
        ("1.5/2s", "is not N/PERIOD"),
        ("0/2s", "count 0 is not a positive integer"),
        ("00/2s", "count 0 is not a positive integer"),
        ("10/0s", "must be positive"),
        ("10/0", "must be positive"),
        ("10/abc", "is not a duration"),
        ("10/2x", "is not a duration"),
        ("10/-2s", "is not a duration"),
        ("10/200y", "is not a duration"),
        ("10/5300w", "longer than the maximum of 100 years"),
    ],
)
def test_parse_rate_refuses_bad_text_naming_the_problem(value: str, named: str) -> None:
    with pytest.raises(jobq.InvalidOption) as raised:
        parse_rate(value)
    assert raised.value.context["option"] == "rate"
    assert str(raised.value).startswith("Option 'rate' is invalid: ")
    assert named in reason(raised), reason(raised)


@pytest.mark.parametrize("value", ["10/abc", "10/2x", "10/-2s", "abc/2s", "", "10"])
def test_a_refused_rate_quotes_what_was_given(value: str) -> None:
    """The message names the text the user gave, so they can find it on their command line."""
    with pytest.raises(jobq.InvalidOption) as raised:
        parse_rate(value)
    assert repr(value) in reason(raised), reason(raised)


@pytest.mark.parametrize(("value", "period"), [("10/abc", "abc"), ("10/s5", "s5")])
def test_a_refused_period_is_quoted_as_written(value: str, period: str) -> None:
    """A bare unit reads as one of it ("5/s" is 5/1s), but a period that is no duration at all
    must be named as the user wrote it, not with that "1" put in front ('1abc')."""
    with pytest.raises(jobq.InvalidOption) as raised:
        parse_rate(value)
    assert repr("1" + period) not in reason(raised), reason(raised)


@pytest.mark.parametrize("value", [None, 10, 2.5, b"10/2s", ["10/2s"], (10, 2), True])
def test_parse_rate_refuses_what_is_not_text(value: Any) -> None:
    with pytest.raises(jobq.InvalidOption) as raised:
        parse_rate(value)
    assert "is not N/PERIOD" in reason(raised)
    assert repr(value) in reason(raised)


def test_parse_rate_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate("nonsense")


# --- Rate -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "period", "named"),
    [
        (0, 1, "count 0 is not a positive integer"),
        (-3, 1, "count -3 is not a positive integer"),
        (True, 1, "count True is not a positive integer"),
        (1.0, 1, "count 1.0 is not a positive integer"),
        ("5", 1, "count '5' is not a positive integer"),
        (None, 1, "count None is not a positive integer"),
        (1, 0, "period 0 must be positive"),
        (1, -1.5, "period -1.5 must be positive"),
        (1, math.inf, "period inf must be positive"),
        (1, math.nan, "period nan must be positive"),
        (1, True, "period True is not a number of seconds"),
        (1, "2s", "period '2s' is not a number of seconds"),
        (1, None, "period None is not a number of seconds"),
    ],
)
def test_rate_refuses_bad_values(count: Any, period: Any, named: str) -> None:
    with pytest.raises(jobq.InvalidOption) as raised:
        Rate(count, period)
    assert raised.value.context["option"] == "rate"
    assert reason(raised) == named


def test_rate_accepts_int_or_float_periods_and_is_a_value() -> None:
    assert Rate(3, 2) == Rate(3, 2.0)
    assert hash(Rate(3, 2)) == hash(Rate(3, 2.0))
    assert Rate(3, 0.25).period == 0.25
    with pytest.raises(AttributeError):
        Rate(3, 2).count = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("rate", "text"),
    [
        (Rate(10, 2), "10/2s"),
        (Rate(10, 2.0), "10/2s"),
        (Rate(100, 60), "100/1m"),
        (Rate(5, 1), "5/1s"),
        (Rate(1, 0.5), "1/0.5s"),
        (Rate(4, 1.5), "4/1.5s"),
        (Rate(1, 90), "1/1m30s"),
        (Rate(3, 5400), "3/1h30m"),
        (Rate(2, 86400), "2/1d"),
        (Rate(2, 604800), "2/7d"),
        (Rate(1, 3600.5), "1/3600.5s"),
    ],
)
def test_rate_text(rate: Rate, text: str) -> None:
    assert str(rate) == text
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    "text", ["1/1h30m15s", "2/1d1h1m1s", "3/1d1m", "5/2h0m1s", "7/10000", "1/1w1s"]
)
def test_rate_text_reads_back_as_the_same_rate(text: str) -> None:
    """str(rate) is what `jobq limits set` and `jobq limits show` print; it must not round
    the period (1h30m15s is not 1h30m), or the limit shown is not the limit enforced."""
    rate = parse_rate(text)
    assert parse_rate(str(rate)) == rate, f"{text} is shown as {rate}"


# --- Limit -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("concurrency", "named"),
    [
        (0, "0 is not a positive integer"),
        (-1, "-1 is not a positive integer"),
        (True, "True is not a positive integer"),
        (False, "False is not a positive integer"),
        ("3", "'3' is not a positive integer"),
        (3.0, "3.0 is not a positive integer"),
    ],
)
def test_limit_refuses_a_bad_concurrency(concurrency: Any, named: str) -> None:
    with pytest.raises(jobq.InvalidOption) as raised:
        Limit("q", concurrency)
    assert raised.value.context["option"] == "concurrency"
    assert reason(raised) == named


def test_limit_needs_a_concurrency_or_a_rate() -> None:
    with pytest.raises(jobq.InvalidOption) as raised:
        Limit("emails")
    assert raised.value.context["option"] == "limit"
    assert reason(raised) == "queue 'emails': give a concurrency, a rate, or both"


@pytest.mark.parametrize(
    ("limit", "text"),
    [
        (Limit("q", 3), "concurrency 3"),
        (Limit("q", rate=Rate(10, 2)), "rate 10/2s"),
        (Limit("q", 1, Rate(100, 60)), "concurrency 1, rate 100/1m"),
    ],
)
def test_limit_text(limit: Limit, text: str) -> None:
    assert str(limit) == text


def test_limit_is_a_value_with_its_generation() -> None:
    assert Limit("q", 3) == Limit("q", 3, generation=0)
    assert Limit("q", 3, generation=1) != Limit("q", 3, generation=2)
    assert Limit("q", 3, Rate(1, 1)).rate == Rate(1, 1.0)
    with pytest.raises(AttributeError):
        Limit("q", 3).concurrency = 4  # type: ignore[misc]
