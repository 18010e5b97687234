"""payload.json_size_at_least: a lower bound of a value's JSON size, counted unencoded."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobq.db.payload import _ENCODER, json_size_at_least

VALUES: list[Any] = [
    0, -1.5, True, None, "", "plain", "é\x01\"\\\n", "\U0001f600",
    [], {}, [1, "two", [3.0, None]], {"k": {"nested": ["x" * 50, {"": False}]}},
    {1: "int key", None: "none key"}, ("a", "tuple"),
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES)
def test_the_count_is_never_more_than_the_json(value: Any) -> None:
    assert json_size_at_least(value, 10**9) <= len(_ENCODER.encode(value))


def test_a_string_that_could_pass_the_limit_escaped_is_counted_exactly() -> None:
    text = "\x01" * 1000 + "a" * 1000  # 7,000 bytes of JSON from 2,000 characters
    exact = len(json.dumps(text))
    assert exact == 7002
    assert json_size_at_least(text, 5000) > 5000  # refused, though its length is not over
    assert json_size_at_least([text], 10_000) == 7002 + 2
    assert json_size_at_least(text, 100_000) == 2002  # far under: its length is enough


def test_the_count_stops_soon_after_the_limit() -> None:
    many = [["y" * 100] for _ in range(100_000)]  # 10.4 MB of JSON, 104 bytes an entry
    assert 10**6 < json_size_at_least(many, 10**6) <= 10**6 + 104


def test_a_cycle_ends_the_count() -> None:
    cycle: list[Any] = ["x"]
    cycle.append(cycle)
    assert json_size_at_least({"c": cycle}, 10**9) < 20
