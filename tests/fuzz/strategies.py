"""Hypothesis strategies for jobq's inputs, each value labelled with whether jobq must take it.

``Input(value, valid)``: ``valid`` True means jobq must accept the value, False that it
must refuse it (naming it), None that either is fine as long as the answer is clean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from jobq.db.durations import MAX_SECONDS
from jobq.db.payload import MAX_DEPTH

INT32 = (-(2**31), 2**31 - 1)


def fuzz(max_examples: int) -> settings:
    """Bounded runs: no deadline (databases vary), no example database, fixtures reused."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
    )


@dataclass(frozen=True)
class Input:
    """A generated value, and whether jobq must accept it (None: either answer)."""

    value: Any
    valid: bool | None


def good(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Input]:
    return strategy.map(lambda value: Input(value, True))


def bad(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Input]:
    return strategy.map(lambda value: Input(value, False))


def either(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Input]:
    return strategy.map(lambda value: Input(value, None))


# --- text -----------------------------------------------------------------------------------

#: Characters that break careless code: NUL, lone surrogates, line and paragraph breaks,
#: a byte-order mark, quotes, format and SQL fragments.
ODD = [
    "\x00", "\ud800", "\udfff", "\udc80", "\U0001f600", " ", "\t", "\n", "\r", "\u2028",
    "\ufeff", "\u200b", "ß", "İ", "\\", "'", '"', "%", "{", "}", "/", ":", "@", "?", "#",
]  # fmt: skip
ODD_STRINGS = ["{}", "{0}", "%s", "--", "'; DROP TABLE jobq_tasks; --", "NULL", "null", "-1"]

#: Any text at all, lone surrogates and NUL included.
any_text = st.one_of(
    st.text(st.one_of(st.characters(), st.sampled_from(ODD)), max_size=30),
    st.sampled_from(ODD_STRINGS),
)

#: Text every database stores as it is: no NUL (PostgreSQL), no lone surrogate (UTF-8).
storable_char = st.characters(codec="utf-8", exclude_characters="\x00")


def keys() -> st.SearchStrategy[str]:
    """A name, queue or key jobq must accept: 1 to 255 storable characters."""
    return st.one_of(
        st.text(storable_char, min_size=1, max_size=40),
        st.sampled_from(
            ["default", " ", "a b", "Émails", "x" * 255, "é" * 255, "\U0001f600" * 255]
        ),
    )


def bad_keys(*, required: bool = True) -> st.SearchStrategy[Any]:
    """A name, queue or key jobq must refuse."""
    valid = st.text(storable_char, max_size=20)
    return st.one_of(
        st.just(""),
        st.text(storable_char, min_size=256, max_size=300),
        st.tuples(valid, st.sampled_from(["\x00", "\ud800", "\udfff"]), valid).map("".join),
        st.integers(),
        st.binary(max_size=5),
        st.lists(st.text(max_size=3), max_size=2),
        *([st.none()] if required else []),
    )


def key_input(*, required: bool = True) -> st.SearchStrategy[Input]:
    return st.one_of(
        good(keys()), bad(bad_keys(required=required)), *([] if required else [good(st.none())])
    )


# --- JSON -----------------------------------------------------------------------------------

HUGE_INTS = [2**63, 2**64, -(2**63) - 1, 2**70, -(2**100), 10**40, 10**4000]
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(storable_char | st.just("\x00"), max_size=20),
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``depth`` levels of alternating arrays and objects."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


#: JSON values jobq must store and read back equal: string keys only, no tuples (the
#: encoder writes {1: x} as {"1": x} and tuples as arrays, which read back otherwise).
json_values = st.one_of(
    st.recursive(
        json_scalars,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(storable_char, max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    st.just(nested(MAX_DEPTH - 1)),  # the deepest an argument may nest
)

#: Values the encoder refuses or a database could not store as arguments.
NOT_STORABLE = [
    {1, 2}, frozenset(), b"bytes", bytearray(b"x"), object(), 1 + 2j, Decimal("1.5"),
    datetime(2024, 1, 1), date(2024, 1, 1), timedelta(1), math.nan, math.inf, -math.inf,
    10**5000, "\ud800", "a\udfffb", ["\udc80"], {"k": "\ud800"}, nested(MAX_DEPTH),
    nested(5000), range(3),
]  # fmt: skip
not_storable = st.sampled_from(NOT_STORABLE).flatmap(
    # Somewhere inside valid containers, too: the error must still name the argument.
    lambda value: st.sampled_from([value, [value], {"inner": value}, [1, {"x": [value]}]])
)

argument_names = st.text(storable_char | st.just("\x00"), max_size=12)


@st.composite
def arguments(draw: st.DrawFn) -> Input:
    """Keyword arguments for Store.enqueue: valid ones, or with one bad part."""
    args = draw(st.dictionaries(argument_names, json_values, max_size=4))
    kind = draw(st.sampled_from(["valid", "none", "bad value", "bad name", "not a mapping"]))
    if kind == "valid":
        return Input(args, True)
    if kind == "none":
        return Input(None, True)
    if kind == "bad value":
        name = draw(argument_names)
        args[name] = draw(not_storable)
        if draw(st.booleans()):  # the bad one among others, not last
            args = {name: args.pop(name), **args}
        return Input(args, False)
    if kind == "bad name":
        name = draw(st.one_of(st.integers(), st.none(), st.booleans(), st.binary(max_size=3)))
        return Input({name: 1, **args} if draw(st.booleans()) else {**args, name: 1}, False)
    return Input(draw(st.sampled_from([[1, 2], "text", 5, [("a", 1)], (), {1, 2}])), False)


# --- numbers and times ----------------------------------------------------------------------


def int_input(low: int, high: int, *, optional: bool = False) -> st.SearchStrategy[Input]:
    """An int from ``low`` to ``high`` (valid; None too if ``optional``), or one beside
    them, or no int at all."""
    return st.one_of(
        good(st.integers(low, high) | st.sampled_from([low, high])),
        bad(
            st.integers(max_value=low - 1)
            | st.integers(min_value=high + 1)
            | st.sampled_from([low - 1, high + 1, 2**63, 2**64, 10**5000, -(10**5000)])
        ),
        bad(st.sampled_from([True, False, 1.0, 2.5, "3", math.nan, Decimal(1)])),
        good(st.none()) if optional else bad(st.none()),
    )


def seconds_input(*, positive: bool, optional: bool = False) -> st.SearchStrategy[Input]:
    """Seconds from 0 (or just above) to 100 years, or a value beside them, or no number."""
    low = math.nextafter(0.0, 1.0) if positive else 0.0
    valid = st.floats(low, MAX_SECONDS) | st.integers(int(positive), MAX_SECONDS)
    invalid = st.one_of(
        st.floats(max_value=-math.ulp(0.0)),
        st.floats(min_value=math.nextafter(MAX_SECONDS, math.inf)),
        st.integers(min_value=MAX_SECONDS + 1),
        st.integers(max_value=-1),
        st.sampled_from([math.nan, math.inf, -math.inf, 10**400, True, "30", "1m", Decimal(5)]),
        *([st.just(0), st.just(0.0)] if positive else []),
    )
    return st.one_of(good(valid), bad(invalid), *([good(st.none())] if optional else []))


def _in_utc(moment: datetime) -> bool:
    """Whether ``moment`` exists in UTC (naive ones are UTC already)."""
    if moment.tzinfo is None:
        return True
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return False
    return True


#: Datetimes from year 1 to 9999, naive or aware; those that do not exist in UTC (an
#: offset past the ends of the calendar) are invalid.
moments = st.one_of(
    st.datetimes(),
    st.datetimes(timezones=st.timezones()),
    st.builds(
        lambda moment, offset: moment if offset is None else moment.replace(tzinfo=offset),
        st.sampled_from([datetime.min, datetime.max]),
        st.sampled_from([None, UTC, timezone(timedelta(hours=5)), timezone(timedelta(hours=-5))]),
    ),
).map(lambda moment: Input(moment, _in_utc(moment)))

run_at_input = st.one_of(
    good(st.none()),
    moments,
    bad(st.sampled_from(["2024-01-01", 1_700_000_000, date(2024, 1, 1), math.nan])),
)
