"""JSON payloads: task arguments and results are JSON documents, never pickles."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jobq.db.errors import InvalidOption, InvalidTaskArguments, PayloadTooLarge
from jobq.db.validation import is_unicode

if TYPE_CHECKING:  # jobq.dialects imports this module: no import of it at run time
    from jobq.db.room import Room

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

#: The most bytes one value takes on any database jobq runs on (PostgreSQL's and SQLite's
#: limit; MySQL's max_allowed_packet is at most 1 GB).
MAX_STORED_BYTES = 1_000_000_000
_ANY_DATABASE = f"no database jobq runs on takes more than {MAX_STORED_BYTES:,} bytes in one value"
_SCALARS = frozenset((int, float, bool, type(None)))
# A string is escaped into JSON in pieces of this many characters when measured.
_PIECE = 1 << 20


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


def encode_args(task: str, args: Mapping[str, Any] | None, room: Room | None = None) -> str:
    """``args`` as a JSON object, or InvalidTaskArguments naming the argument that is not
    JSON; PayloadTooLarge, before anything is encoded, for arguments sure to take more
    than ``room`` takes (by default, more than any database takes)."""
    return encode_args_array(task, [args], room)[1:-1]


def encode_args_array(
    task: str,
    args_list: Sequence[Mapping[str, Any] | None],
    room: Room | None = None,
    first: int | None = None,
) -> str:
    """A JSON array of the ``args_list`` objects, encoded in one call; errors name the
    culprit. An entry too large is refused first (see encode_args), named as entry
    ``first`` + its index of the caller's list when ``first`` is given or there are
    several."""
    checked = [check_args(task, args) for args in args_list]
    limit, why = _limit(room)
    numbered = first is not None or len(checked) > 1
    for index, args in enumerate(checked):
        entry = (first or 0) + index if numbered else None
        refuse_oversized(task, args, limit, why, entry)
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


def _limit(room: Room | None) -> tuple[int, str]:
    """The bytes a value may take in ``room`` (None: on any database), and whose limit."""
    return (MAX_STORED_BYTES, _ANY_DATABASE) if room is None else (room.limit, room.why)


def larger_than(value: Any, limit: int) -> bool:
    """Whether ``value``'s JSON is sure to take more than ``limit`` bytes, counted without
    building it (json_size_at_least)."""
    return type(value) not in _SCALARS and json_size_at_least(value, limit) > limit


def refuse_oversized(
    task: str, args: Mapping[str, Any], limit: int, why: str, entry: int | None = None
) -> None:
    """PayloadTooLarge naming the argument (the entry of a list, when ``entry`` is given)
    when ``args`` are sure to take over ``limit`` bytes as JSON: measured without building
    their JSON, which for a value of a gigabyte would take several gigabytes of memory."""
    total = 2  # the braces
    for key, value in args.items():
        kind = type(value)
        if kind in _SCALARS:  # the most common arguments, counted the cheapest way
            size = 1
        elif kind is str and len(value) * 12 + total <= limit:  # fits even all escaped
            size = 2 + len(value)
        else:
            size = json_size_at_least(value, limit - total)
        size += len(key) + 4  # its quotes, colon and comma
        total += size
        if total <= limit:
            continue
        where = "" if entry is None else f" (entry {entry} of the list)"
        what = (
            f"Argument {key!r} of task {task!r}{where} takes"
            if size > limit
            else f"The arguments of task {task!r}{where} take"
        )
        raise PayloadTooLarge(
            f"{what} more than {limit:,} bytes as JSON, more than this database takes in "
            f"one statement ({why})",
            what=what, size=total, why=why,
        )  # fmt: skip


def json_size_at_least(value: Any, limit: int) -> int:
    """At least as many bytes as ``value``'s JSON takes, counted without building it, and
    over ``limit`` if that JSON is: the count stops soon after it passes ``limit``.

    Each string counts its characters (a character takes a byte or more, escaped); a
    string whose escapes could take it over ``limit`` is escaped in pieces and counted
    exactly. Other values count a byte, and a container met again is not counted again
    (so a cycle ends the count). Values that are not JSON count what they hold or a
    byte: the encoder says what is wrong with them.
    """
    if not isinstance(value, _CONTAINERS):
        return _leaf_size(value, limit)
    size = 0
    pending = [value]
    seen = {id(value)}
    while pending and size <= limit:
        container = pending.pop()
        # Brackets, commas; an object's keys with their quotes and colons.
        size += 1 + len(container)
        members: Iterable[Any] = container
        if isinstance(container, dict):
            size += 3 * len(container) + sum(len(k) for k in container if type(k) is str)
            members = container.values()
        for member in members:  # the cheapest checks first: this loop is the walk
            kind = type(member)
            if kind in _SCALARS:
                size += 1
            elif kind is str and len(member) * 12 + size <= limit:  # fits even all escaped
                size += 2 + len(member)
            elif isinstance(member, _CONTAINERS):
                if id(member) not in seen:
                    seen.add(id(member))
                    pending.append(member)
            else:
                size += _leaf_size(member, limit - size)
                if size > limit:
                    break
    return size


def _leaf_size(value: Any, limit: int) -> int:
    """At least as many bytes as the JSON of ``value`` (no container) takes, exact for a
    string that could take over ``limit`` bytes but has no more characters than that."""
    if not isinstance(value, str):
        return 1
    # ensure_ascii: at most 6 bytes an ASCII character (\u001f), 12 any other.
    widest = len(value) * (6 if value.isascii() else 12)
    if widest + 2 <= limit or len(value) > limit:
        return 2 + len(value)
    return 2 + _escaped_size(value, limit)


def _escaped_size(text: str, limit: int) -> int:
    """The bytes of ``text``'s JSON but its quotes, counted a piece at a time, stopping
    once past ``limit``."""
    size = 0
    for start in range(0, len(text), _PIECE):
        size += len(_ENCODER.encode(text[start : start + _PIECE])) - 2
        if size > limit:
            break
    return size


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


def checked_result(result: Any, sized: bool = False) -> tuple[str, str | None]:
    """``result`` as JSON text, and why it cannot be stored (None: it can). A result sure
    to take more bytes than any database takes is not encoded, unless ``sized`` (the
    caller found it small enough: see larger_than)."""
    if not sized and larger_than(result, MAX_STORED_BYTES):
        return "", f"cannot be stored: it takes more than {MAX_STORED_BYTES:,} bytes as JSON"
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
