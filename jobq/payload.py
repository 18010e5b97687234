"""JSON payloads: task arguments and results are JSON documents, never pickles."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jobq.errors import InvalidOption, InvalidTaskArguments
from jobq.validation import is_unicode

# One encoder for every call: json.dumps with non-default options builds a new encoder
# each time, which dominated bulk enqueue. allow_nan=False because NaN and Infinity are
# not JSON, and other languages reading the rows would choke on them.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_NOT_JSON = (TypeError, ValueError, RecursionError)
# Writes strings as they are, so that encoding its text as UTF-8 finds lone surrogates.
_UNESCAPED = json.JSONEncoder(ensure_ascii=False)

#: The deepest nesting of objects and arrays in a stored document (arguments count as
#: one level): MariaDB checks its JSON columns with JSON_VALID, which refuses deeper ones.
MAX_DEPTH = 31
# What the encoder writes as JSON objects and arrays.
_CONTAINERS = (dict, list, tuple)


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
        text = _ENCODER.encode(checked)
    except _NOT_JSON:
        for args in checked:
            for key, value in args.items():
                try:
                    _ENCODER.encode(value)
                except _NOT_JSON as error:
                    raise InvalidTaskArguments(argument=key, task=task, reason=error) from None
        raise
    # Cheap tests first: arguments nest deeply only with as many brackets, and a lone
    # surrogate is escaped as \udXXX (as is each half of a pair: characters past U+FFFF).
    brackets = text.count("[") + text.count("{") - len(checked) - 1
    if (brackets >= MAX_DEPTH and _deeper_than(checked, MAX_DEPTH + 1)) or (
        "\\ud" in text and not _is_unicode(checked)
    ):
        for args in checked:
            for key, value in args.items():
                problem = _unstorable(key, value)
                if problem:
                    raise InvalidTaskArguments(argument=key, task=task, reason=problem)
    return text


def _unstorable(key: str, value: Any) -> str | None:
    """Why argument ``key`` (JSON already) cannot be stored on every database, or None."""
    if _deeper_than(value, MAX_DEPTH - 1):
        return f"it nests more than {MAX_DEPTH - 1} levels of objects and arrays"
    if not _is_unicode([key, value]):
        return "it holds a lone surrogate, which is not Unicode text"
    return None


def _deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` nests more than ``levels`` levels of objects and arrays."""
    containers = [value] if isinstance(value, _CONTAINERS) else []
    for _ in range(levels):
        containers = [
            item
            for container in containers
            for item in (container.values() if isinstance(container, dict) else container)
            if isinstance(item, _CONTAINERS)
        ]
    return bool(containers)


def _is_unicode(value: Any) -> bool:
    """Whether every string in ``value`` (JSON already) is valid Unicode text."""
    return is_unicode(_UNESCAPED.encode(value))


#: The longest error text stored: longer ones keep their start and end around a marker.
MAX_ERROR_CHARS = 100_000


def storable_text(text: str) -> str:
    """``text`` as every database stores it whole: NUL and lone surrogates escaped (as the
    characters ``\\x00`` and ``\\udcff``, say), the middle cut past MAX_ERROR_CHARS."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")  # PostgreSQL's text cannot hold NUL
    if not is_unicode(text):  # undecodable bytes a task put in a str (os.fsdecode)
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_ERROR_CHARS:
        half = MAX_ERROR_CHARS // 2
        cut = len(text) - 2 * half
        text = f"{text[:half]}\n... [{cut:,} characters cut] ...\n{text[-half:]}"
    return text


def result_problem(result: Any) -> str | None:
    """Why ``result`` cannot be stored ("is not JSON: ...", "cannot be stored: ..."), or None."""
    return checked_result(result)[1]


def encode_result(result: Any) -> str | None:
    """``result`` as JSON text (None stays None, stored as SQL NULL), or InvalidOption."""
    if result is None:
        return None
    text, problem = checked_result(result)
    if problem is not None:
        raise InvalidOption(option="result", reason=f"it {problem}")
    return text


def checked_result(result: Any) -> tuple[str, str | None]:
    """``result`` as JSON text, and why it cannot be stored (None: it can)."""
    try:
        text = _ENCODER.encode(result)
    except _NOT_JSON as error:
        return "", f"is not JSON: {error}"
    # The same cheap tests as for arguments first (see encode_args_array).
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than(result, MAX_DEPTH):
        return (
            text,
            f"cannot be stored: it nests more than {MAX_DEPTH} levels of arrays and objects",
        )
    if "\\ud" in text and not _is_unicode(result):
        return text, "cannot be stored: it holds a lone surrogate, which is not Unicode text"
    return text, None


def encode_records(records: Sequence[Mapping[str, Any]]) -> str:
    """A JSON array of ``records`` whose values are JSON already (checked by the caller)."""
    return _ENCODER.encode(records)
