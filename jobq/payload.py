"""JSON payloads: task arguments and results are JSON documents, never pickles."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jobq.errors import InvalidOption, InvalidTaskArguments

# One encoder for every call: json.dumps with non-default options builds a new encoder
# each time, which dominated bulk enqueue. allow_nan=False because NaN and Infinity are
# not JSON, and other languages reading the rows would choke on them.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_NOT_JSON = (TypeError, ValueError, RecursionError)


def check_args(task: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``args`` as a dict of keyword arguments, or InvalidTaskArguments saying what is wrong."""
    if args is None:
        return {}
    if type(args) is not dict and not isinstance(args, Mapping):
        raise InvalidTaskArguments(
            f"arguments of task {task!r} must be a mapping of names to values, "
            f"not {type(args).__name__}"
        )
    for key in args:
        if type(key) is not str:
            raise InvalidTaskArguments(
                f"argument names of task {task!r} must be strings, not {key!r}"
            )
    return args if type(args) is dict else dict(args)


def encode_args(task: str, args: Mapping[str, Any] | None) -> str:
    """``args`` as a JSON object, or InvalidTaskArguments naming the argument that is not JSON."""
    return encode_args_array(task, [args])[1:-1]


def encode_args_array(task: str, args_list: Sequence[Mapping[str, Any] | None]) -> str:
    """A JSON array of the ``args_list`` objects, encoded in one call; errors name the culprit."""
    checked = [check_args(task, args) for args in args_list]
    try:
        return _ENCODER.encode(checked)
    except _NOT_JSON:
        for args in checked:
            for key, value in args.items():
                try:
                    _ENCODER.encode(value)
                except _NOT_JSON as error:
                    raise InvalidTaskArguments(argument=key, task=task, reason=error) from None
        raise


def result_problem(result: Any) -> str | None:
    """Why ``result`` cannot be stored as JSON, or None if it can."""
    try:
        _ENCODER.encode(result)
    except _NOT_JSON as error:
        return str(error)
    return None


def encode_result(result: Any) -> str | None:
    """``result`` as JSON text (None stays None, stored as SQL NULL), or InvalidOption."""
    if result is None:
        return None
    try:
        return _ENCODER.encode(result)
    except _NOT_JSON as error:
        raise InvalidOption(option="result", reason=f"not JSON-serialisable: {error}") from None


def encode_records(records: Sequence[Mapping[str, Any]]) -> str:
    """A JSON array of ``records`` whose values are JSON already (checked by the caller)."""
    return _ENCODER.encode(records)
