"""Parsing the command line's values: JSON objects, keys, durations, task files."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import click

from jobq.cli.common import PRIORITY, RETRIES
from jobq.db.durations import parse_duration
from jobq.db.errors import InvalidOption
from jobq.db.validation import check_int, check_key


def _json_type(value: Any) -> str:
    """The JSON name of ``value``'s type with its article, for messages: "an array"."""
    if isinstance(value, bool):
        return "a boolean"
    names = {dict: "an object", list: "an array", str: "a string", int: "a number"}
    return "null" if value is None else names.get(type(value), "a number")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in JSON")


# One decoder for every call: json.loads with an option builds a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _json_object(text: str) -> dict[str, Any]:
    """``text`` decoded as a JSON object, or ValueError saying what is wrong with it."""
    try:
        value = _DECODER.decode(text)
    except ValueError as error:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"not valid JSON: {error}") from None
    except RecursionError:
        raise ValueError("not valid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise ValueError(f"must be a JSON object, not {_json_type(value)}")
    return value


class JsonObject(click.ParamType):
    """A JSON object of keyword arguments."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            return _json_object(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


class Key(click.ParamType):
    """A task name, queue name or unique key: non-empty, at most 255 characters."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            check_key("value", value, required=True)
        except InvalidOption as error:
            self.fail(str(error.context.get("reason", error)), param, ctx)
        return value


class UnsignedInt(click.ParamType):
    """A whole number from 0 to 2**bits - 1.

    Help and errors say "0 to 2^128-1": click.IntRange would print all 39 digits.
    """

    name = "integer"

    def __init__(self, bits: int) -> None:
        self.bits = bits
        #: The range as people read it, for help texts.
        self.described = f"0 to 2^{bits}-1"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.INT.convert(value, param, ctx)
        if not 0 <= number < 2**self.bits:
            self.fail(f"{number} is not in the range {self.described}.", param, ctx)
        return number


class Duration(click.ParamType):
    """Seconds, written as 90, 30s, 15m, 12h, 7d or 1w."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_duration(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)


class KeepFor(Duration):
    """How long to keep something: a duration, or ``forever`` (math.inf)."""

    name = "duration|forever"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.strip().lower() == "forever":
            return math.inf
        if isinstance(value, float) and math.isinf(value):
            return value
        seconds = super().convert(value, param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} keeps nothing: give a duration over 0, or forever", param, ctx)
        return seconds


@dataclass(frozen=True)
class TaskLine:
    """One task to enqueue: its name, arguments and Store.enqueue keyword options."""

    name: str
    kwargs: dict[str, Any]
    options: tuple[tuple[str, Any], ...]


#: Keys a --file line may carry, and the Store.enqueue option each one becomes.
LINE_OPTIONS = {
    "queue": "queue",
    "delay": "delay",
    "priority": "priority",
    "unique": "unique_key",
    "retries": "retries",
    "fair_key": "fair_key",
}
_LINE_KEYS = frozenset(("name", "kwargs", *LINE_OPTIONS))


def task_line(text: str) -> TaskLine:
    """One --file line as a TaskLine, or ValueError (or another JobqError) saying what is wrong.

    Its kwargs are JSON; whether a database can store them (nesting, lone surrogates) is
    for enqueue to check, which does it for many lines at once.
    """
    entry = _json_object(text)
    if not entry.keys() <= _LINE_KEYS:
        unknown = sorted(entry.keys() - _LINE_KEYS)
        expected = ", ".join(["name", "kwargs", *LINE_OPTIONS])
        raise ValueError(f"unknown key {unknown[0]!r}; expected: {expected}")
    if "name" not in entry:
        raise ValueError("'name' is missing")
    check_key("name", entry["name"], required=True)
    kwargs = entry.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ValueError(f"'kwargs' must be a JSON object, not {_json_type(kwargs)}")
    options: dict[str, Any] = {}
    for key, option in LINE_OPTIONS.items():
        if key not in entry:
            continue
        value = entry[key]
        if key in ("queue", "unique", "fair_key"):
            check_key(key, value, required=True)
        elif key == "delay":
            try:
                value = parse_duration(value)
            except ValueError as error:
                raise ValueError(f"'delay': {error}") from None
        else:
            bounds = PRIORITY if key == "priority" else RETRIES
            assert bounds.min is not None  # both ranges have a lower bound
            check_int(key, value, minimum=bounds.min)
            if bounds.max is not None and value > bounds.max:
                raise InvalidOption(option=key, reason=f"{value} is above {bounds.max}")
        options[option] = value
    return TaskLine(entry["name"], kwargs, tuple(options.items()))
