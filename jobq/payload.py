"""JSON payloads: task arguments and results are JSON documents, never pickles."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jobq.errors import InvalidOption, InvalidTaskArguments


def _dumps(value: Any) -> str:
    # allow_nan=False: NaN and Infinity are not JSON, and other languages reading the
    # row would choke on them.
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def encode_args(task: str, args: Mapping[str, Any] | None) -> str:
    """``args`` as a JSON object, or InvalidTaskArguments naming the argument that is not JSON."""
    if args is None:
        return "{}"
    if not isinstance(args, Mapping):
        raise InvalidTaskArguments(
            f"arguments of task {task!r} must be a mapping of names to values, "
            f"not {type(args).__name__}"
        )
    for key in args:
        if not isinstance(key, str):
            raise InvalidTaskArguments(
                f"argument names of task {task!r} must be strings, not {key!r}"
            )
    try:
        return _dumps(args)
    except (TypeError, ValueError, RecursionError):
        # Find the culprit, so the message can name it.
        for key, value in args.items():
            try:
                _dumps(value)
            except (TypeError, ValueError, RecursionError) as error:
                raise InvalidTaskArguments(argument=key, task=task, reason=error) from None
        raise


def check_result(result: Any) -> None:
    """Raise InvalidOption unless ``result`` can be stored as JSON."""
    try:
        _dumps(result)
    except (TypeError, ValueError, RecursionError) as error:
        raise InvalidOption(option="result", reason=f"not JSON-serialisable: {error}") from None
