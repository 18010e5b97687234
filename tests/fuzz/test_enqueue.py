"""Enqueueing generated input, on every database: each input is either stored exactly as
given, or refused with a one-line JobqError naming the bad part, writing nothing at all.

Store.enqueue and enqueue_many take every option; App.enqueue, App.enqueue_many and
TaskFunction.enqueue add registered names, signatures and key templates on top.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import jobq
from jobq.db.payload import MAX_DEPTH
from jobq.db.tasks import as_utc
from tests.fuzz.conftest import Seeded, added_tasks, holder, one_line
from tests.fuzz.strategies import (
    INT32,
    Input,
    arguments,
    bad,
    fuzz,
    good,
    int_input,
    json_values,
    key_input,
    keys,
    nested,
    not_storable,
    run_at_input,
    seconds_input,
    storable_char,
)

#: Store.enqueue's options (bar connection), each with the values to try.
OPTIONS: dict[str, st.SearchStrategy[Input]] = {
    "queue": key_input(),
    "priority": int_input(*INT32),
    "run_at": run_at_input,
    "delay": seconds_input(positive=False, optional=True),
    "retries": int_input(0, INT32[1]),
    "timeout": seconds_input(positive=True, optional=True),
    "lease": seconds_input(positive=True, optional=True),
    "unique_key": st.one_of(key_input(required=False), good(st.just("held"))),
    "lock_key": key_input(required=False),
}


@st.composite
def options(draw: st.DrawFn) -> dict[str, Input]:
    """Some of Store.enqueue's options, each valid or not."""
    names = draw(st.sets(st.sampled_from(sorted(OPTIONS)), max_size=4))
    return {name: draw(OPTIONS[name]) for name in sorted(names)}


def culprits(name: Input, args: Input, given: Mapping[str, Input]) -> set[str]:
    """What an error may name: each bad part (arguments as "args")."""
    named = {option for option, value in given.items() if value.valid is False}
    if name.valid is False:
        named.add("name")
    if args.valid is False:
        named.add("args")
    both = [given.get(option, Input(None, True)).value for option in ("run_at", "delay")]
    if None not in both:
        named.add("run_at")  # "give run_at or delay, not both"
    return named


def check_refusal(error: jobq.JobqError, named: set[str]) -> None:
    """``error`` is one line naming one of the ``named`` bad parts."""
    one_line(str(error))
    if isinstance(error, jobq.InvalidOption):
        assert error.context["option"] in named, (error, named)
    else:
        assert isinstance(error, jobq.InvalidTaskArguments), error
        assert "args" in named, (error, named)


def check_row(
    store: jobq.Store, task_id: int, name: str, args: Any, given: Mapping[str, Any]
) -> None:
    """Task ``task_id`` holds exactly what was enqueued (and the defaults for the rest)."""
    task = store.get(task_id)
    assert task is not None and task.status == "queued" and task.attempt == 0
    assert task.name == name
    assert task.args == ({} if args is None else args)
    assert json.dumps(task.args) == json.dumps({} if args is None else args)  # -0.0; 1 or 1.0
    assert task.queue_id == given.get("queue", "default")
    assert task.priority == given.get("priority", 0)
    assert task.retries_left == given.get("retries", 3)
    lease = given.get("lease")  # None: the worker's definition decides
    assert task.lease == (None if lease is None else float(lease))
    timeout = given.get("timeout")
    assert task.timeout == (None if timeout is None else float(timeout))
    assert task.unique_key == given.get("unique_key")
    assert task.lock_key == given.get("lock_key")
    if given.get("run_at") is not None:
        wanted = as_utc(given["run_at"])
        assert abs(task.run_at - wanted) <= timedelta(milliseconds=1), (task.run_at, wanted)
    elif given.get("delay") is not None:
        waited = (task.run_at - task.created_at).total_seconds()
        assert math.isclose(waited, given["delay"], rel_tol=1e-9, abs_tol=0.002), waited
    else:
        assert task.run_at == task.created_at


@fuzz(70)
@given(name=st.one_of(good(keys()), bad(st.sampled_from(["", "x" * 256, "a\x00b", "\ud800"]))),
       args=arguments(), given_options=options())  # fmt: skip
@example(name=Input("a\x00b", False), args=Input({}, True), given_options={})
@example(name=Input("t", True), args=Input({}, True),
         given_options={"queue": Input("q\x00", False)})  # fmt: skip
@example(name=Input("t", True), args=Input({"x": "\ud800"}, False), given_options={})
@example(name=Input("t", True), args=Input({"x": nested(31)}, False), given_options={})
@example(name=Input("t", True), args=Input({}, True),
         given_options={"priority": Input(2**40, False)})  # fmt: skip
@example(name=Input("t", True), args=Input({}, True),
         given_options={"delay": Input(1e12, False)})  # fmt: skip
@example(name=Input("t", True), args=Input({}, True),
         given_options={"lease": Input(1e300, False)})  # fmt: skip
@example(name=Input("t", True), args=Input({}, True),
         given_options={"delay": Input(10**400, False)})  # fmt: skip
@example(name=Input("t", True), args=Input({}, True),
         given_options={"priority": Input(10**5000, False)})  # fmt: skip
@example(
    name=Input("t", True), args=Input({}, True),
    given_options={"run_at": Input(datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), False)},
)  # fmt: skip
def test_store_enqueue_stores_exactly_what_it_accepts(
    seeded: Seeded, name: Input, args: Input, given_options: dict[str, Input]
) -> None:
    """Store.enqueue either writes one row holding exactly the name, arguments and
    options given (or returns the holder of an already held unique key, writing nothing),
    or raises a one-line InvalidOption / InvalidTaskArguments naming a bad part and leaves
    every table as it was. Valid parts are never refused, bad ones never accepted."""
    store = seeded.store
    values = {option: value.value for option, value in given_options.items()}
    named = culprits(name, args, given_options)
    held_by = holder(store, values.get("unique_key"))
    before = seeded.tables.before()
    try:
        task_id = store.enqueue(name.value, args.value, **values)
    except jobq.JobqError as error:
        assert named, f"refused valid input: {error}"
        check_refusal(error, named)
        assert seeded.tables.after() == before
        return
    assert not named, f"accepted bad {named}"
    new = added_tasks(before, seeded.tables.after())
    if held_by is not None:
        assert (task_id, new) == (held_by, [])
        return
    assert new == [task_id]
    check_row(store, task_id, name.value, args.value, values)


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Any], int | None]:
    """Arguments for enqueue_many: all valid, or with one bad entry among good ones."""
    good_args = st.one_of(
        st.none(), st.dictionaries(st.text(storable_char, max_size=6), json_values, max_size=3)
    )
    batch = draw(st.lists(good_args, min_size=1, max_size=8))
    if draw(st.booleans()):
        return batch, None
    position = draw(st.integers(0, len(batch)))
    bad_entry = draw(
        st.one_of(
            st.builds(dict, st.tuples(st.tuples(st.text(max_size=4), not_storable))),
            st.sampled_from([[1], "text", 7, {3: "x"}, {None: 1}]),
        )
    )
    batch.insert(position, bad_entry)
    return batch, position


@fuzz(80)
@given(batch=batches(), unique=st.sampled_from([None, None, "held", "fresh-key"]),
       priority=int_input(*INT32))  # fmt: skip
@example(batch=([{"a": 1}, {"b": "\ud800"}, {"c": 3}], 1), unique=None, priority=Input(0, True))
@example(batch=([{"a": 1}, {"b": nested(40)}], 1), unique=None, priority=Input(0, True))
@example(batch=([{"a": 1}], None), unique=None, priority=Input(2**31, False))
def test_enqueue_many_writes_all_or_nothing(
    seeded: Seeded, batch: tuple[list[Any], int | None], unique: str | None, priority: Input
) -> None:
    """Store.enqueue_many writes one row per entry, in order, or, when any entry or the
    shared options are bad, raises a one-line JobqError and writes nothing at all; with a
    unique key every entry names the one task holding it."""
    store = seeded.store
    args_list, bad_at = batch
    held_by = holder(store, unique)
    before = seeded.tables.before()
    try:
        ids = store.enqueue_many("bulk", args_list, unique_key=unique, priority=priority.value)
    except jobq.JobqError as error:
        assert bad_at is not None or priority.valid is False, f"refused valid input: {error}"
        one_line(str(error))
        assert seeded.tables.after() == before
        return
    assert bad_at is None and priority.valid, "accepted a bad batch"
    new = added_tasks(before, seeded.tables.after())
    if held_by is not None:
        assert (ids, new) == ([held_by] * len(args_list), [])
    elif unique is not None:
        assert new == ids[:1] and set(ids) == set(new)
        options = {"unique_key": unique, "priority": priority.value}
        check_row(store, new[0], "bulk", args_list[0], options)
    else:
        assert ids == sorted(ids) and new == ids
        for task_id, args in zip(new, args_list, strict=True):
            check_row(store, task_id, "bulk", args, {"priority": priority.value})


# --- the App: registered names, signatures, templates ------------------------------------


def make_app(store: jobq.Store) -> jobq.App:
    """An app on ``store`` with tasks of several signatures and key templates."""
    app = jobq.App()
    app.store = store

    @app.task
    def send(to: str, subject: str = "hi") -> None: ...

    @app.task(queue="reports", priority=3, unique="report:{day}")
    def report(day: Any) -> None: ...

    @app.task(lock="account:{n:d}")  # a format spec: only integers fit
    def charge(n: Any) -> None: ...

    @app.task
    def anything(**kwargs: Any) -> None: ...

    return app


SIGNATURES = {"send": {"to", "subject"}, "report": {"day"}, "charge": {"n"}}


@st.composite
def app_calls(draw: st.DrawFn) -> tuple[str, dict[str, Any], bool | None]:
    """(name, kwargs, valid): a registered or unknown name, with kwargs that fit it or not.

    ``valid`` is None where only the database can say (a key formatted from the value).
    """
    name = draw(st.sampled_from([*SIGNATURES, "anything"]) | st.text(max_size=10))
    value = st.one_of(json_values, not_storable)
    if name in ("send", "report", "charge"):
        wanted = SIGNATURES[name] - ({"subject"} if draw(st.booleans()) else set())
        kwargs = {key: draw(value) for key in sorted(wanted)}
        extra = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=1))
        kwargs.update(extra)
    elif name == "anything":
        kwargs = draw(st.dictionaries(st.text(max_size=5), value, max_size=3))
    else:
        return name, draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2)), False
    storable = not any(map(_unstorable, kwargs.values()))
    fits = name == "anything" or (
        set(kwargs) <= SIGNATURES[name] and set(kwargs) >= SIGNATURES[name] - {"subject"}
    )
    if not (storable and fits):
        return name, kwargs, False
    if name == "charge":
        n = kwargs["n"]
        return name, kwargs, isinstance(n, int) and len(f"account:{n:d}") <= 255
    if name == "report":
        return name, kwargs, None  # str(day) may be long, or hold a NUL
    return name, kwargs, True


def _unstorable(value: Any) -> bool:
    """Whether ``value`` (from json_values or not_storable) is no argument jobq stores:
    not JSON, not Unicode text, or nested more than 30 levels."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return True
    return _depth(value) > MAX_DEPTH - 1


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@fuzz(50)
@given(call=app_calls(), queue=key_input(required=False),
       delay=seconds_input(positive=False, optional=True))  # fmt: skip
@example(call=("charge", {"n": "x"}, False), queue=Input(None, True), delay=Input(None, True))
@example(call=("charge", {"n": 1.5}, False), queue=Input(None, True), delay=Input(None, True))
@example(call=("send", {"to": "a"}, True), queue=Input("", False), delay=Input(None, True))
@example(call=("report", {"day": "\x00"}, False), queue=Input(None, True), delay=Input(None, True))
def test_app_enqueue_checks_name_signature_and_keys_first(
    seeded: Seeded, call: tuple[str, dict[str, Any], bool | None], queue: Input, delay: Input
) -> None:
    """App.enqueue either writes the one row the task's definition says (its queue
    unless one is given, its priority, its unique and lock keys formatted from the
    arguments), or raises a one-line JobqError (UnknownTask, InvalidTaskArguments,
    InvalidOption) and writes nothing; registered calls that fit are never refused."""
    name, kwargs, fits = call
    app = make_app(seeded.store)
    valid = None if fits is None else fits and bool(queue.valid) and bool(delay.valid)
    definition = app.registry.get(name)
    unique = None
    if definition is not None and not any(map(_unstorable, kwargs.values())):
        with contextlib.suppress(jobq.JobqError):  # the call is refused then
            unique = definition.unique_key(kwargs)
    held_by = holder(seeded.store, unique)
    before = seeded.tables.before()
    try:
        task_id = app.enqueue(name, kwargs, queue=queue.value, delay=delay.value)
    except jobq.JobqError as error:
        assert valid is not True, f"refused a valid call: {error}"
        one_line(str(error))
        if name not in (*SIGNATURES, "anything"):
            assert isinstance(error, jobq.UnknownTask) and repr(name) in str(error)
        assert seeded.tables.after() == before
        return
    assert valid is not False, "accepted a bad call"
    new = added_tasks(before, seeded.tables.after())
    assert definition is not None
    if held_by is not None:
        assert (task_id, new) == (held_by, [])
        return
    assert new == [task_id]
    check_row(seeded.store, task_id, name, kwargs, {
        "queue": definition.queue if queue.value is None else queue.value,
        "priority": definition.priority, "delay": delay.value,
        "unique_key": definition.unique_key(kwargs), "lock_key": definition.lock_key(kwargs),
    })  # fmt: skip


@fuzz(60)
@given(
    entries=st.lists(st.integers(-(10**6), 10**6).map(lambda n: {"n": n}), min_size=1, max_size=6),
    bad_entry=st.one_of(st.none(), st.sampled_from(
        [{"n": "text"}, {"n": 2**900}, {"m": 1}, {}, {"n": 1, "extra": 2}, {"n": {1, 2}}, [1]]
    )),
    position=st.integers(0, 6),
)  # fmt: skip
@example(entries=[{"n": 1}], bad_entry={"n": 1.5}, position=1)
def test_app_enqueue_many_with_a_bad_entry_writes_nothing(
    seeded: Seeded, entries: list[dict[str, Any]], bad_entry: Any, position: int
) -> None:
    """App.enqueue_many of a task with a lock template formats every key before writing:
    one entry that does not fit (wrong type for ``{n:d}``, a key over 255 characters, a
    missing or extra argument) raises a one-line JobqError and no entry is written."""
    app = make_app(seeded.store)
    batch: list[Any] = list(entries)
    if bad_entry is not None:
        batch.insert(min(position, len(batch)), bad_entry)
    before = seeded.tables.before()
    try:
        ids = app.enqueue_many("charge", batch)
    except jobq.JobqError as error:
        assert bad_entry is not None, f"refused valid entries: {error}"
        one_line(str(error))
        assert seeded.tables.after() == before
        return
    assert bad_entry is None, "accepted a bad entry"
    assert added_tasks(before, seeded.tables.after()) == ids
    for task_id, entry in zip(ids, batch, strict=True):
        check_row(seeded.store, task_id, "charge", entry, {"lock_key": f"account:{entry['n']}"})


#: TaskFunction.enqueue's underscore options, each with the values to try.
UNDERSCORE: dict[str, st.SearchStrategy[Input]] = {
    "_queue": key_input(required=False),
    "_priority": int_input(*INT32, optional=True),
    "_delay": seconds_input(positive=False, optional=True),
    "_run_at": run_at_input,
    "_later": bad(st.just(5)),  # not an option: refused, not taken for an argument
    "_": bad(st.just(1)),
}


@st.composite
def underscore_options(draw: st.DrawFn) -> dict[str, Input]:
    """Some of TaskFunction.enqueue's underscore options (or unknown ones), valid or not."""
    names = draw(st.sets(st.sampled_from(sorted(UNDERSCORE)), max_size=3))
    return {name: draw(UNDERSCORE[name]) for name in sorted(names)}


@fuzz(80)
@given(to=st.one_of(good(st.text(max_size=10)), bad(not_storable)), chosen=underscore_options())
@example(to=Input("a", True), chosen={"_later": Input(5, False)})
@example(to=Input("a", True), chosen={"_queue": Input("", False)})
def test_task_function_enqueue_takes_underscore_options(
    seeded: Seeded, to: Input, chosen: dict[str, Input]
) -> None:
    """TaskFunction.enqueue(**kwargs) splits off its underscore options (an unknown one
    is an InvalidTaskArguments, not a bare TypeError) and then behaves as App.enqueue:
    one row as given, or a one-line JobqError and nothing written."""
    app = make_app(seeded.store)
    send = jobq.TaskFunction(app, app.definition("send"))
    both = [chosen.get(key, Input(None, True)).value for key in ("_run_at", "_delay")]
    valid = to.valid and all(value.valid for value in chosen.values()) and None in both
    before = seeded.tables.before()
    try:
        task_id = send.enqueue(to=to.value, **{key: value.value for key, value in chosen.items()})
    except jobq.JobqError as error:
        assert not valid, f"refused a valid call: {error}"
        one_line(str(error))
        assert seeded.tables.after() == before
        return
    assert valid, "accepted a bad call"
    assert added_tasks(before, seeded.tables.after()) == [task_id]
    given_options = {key[1:]: v.value for key, v in chosen.items() if v.value is not None}
    check_row(seeded.store, task_id, "send", {"to": to.value}, given_options)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_arguments_as_deep_as_allowed_round_trip_and_one_deeper_is_refused(
    seeded: Seeded,
) -> None:
    """The depth limit is exact: an argument nesting 30 levels (its document 31, all
    MariaDB's JSON_VALID takes) is stored and read back; 31 is refused naming it."""
    store = seeded.store
    task_id = store.enqueue("t", {"deep": nested(30)})
    task = store.get(task_id)
    assert task is not None and task.args == {"deep": nested(30)}
    before = seeded.tables.before()
    with pytest.raises(jobq.InvalidTaskArguments, match=r"'deep'.*more than 30 levels"):
        store.enqueue("t", {"ok": 1, "deep": nested(31)})
    assert seeded.tables.after() == before


def test_characters_past_the_basic_plane_are_not_taken_for_lone_surrogates(
    seeded: Seeded,
) -> None:
    """The encoder escapes U+1F600 as a surrogate pair: the check for lone surrogates
    must let pairs through, in names, keys and arguments alike, on every database."""
    store = seeded.store
    text = "\U0001f600 \U00010348 \ud7ff \ue000"
    task_id = store.enqueue(text, {text: [text]}, queue=text, unique_key=text)
    task = store.get(task_id)
    assert task is not None and (task.name, task.args) == (text, {text: [text]})
    assert (task.queue_id, task.unique_key) == (text, text)


def test_an_aware_run_at_is_stored_as_the_same_instant(seeded: Seeded) -> None:
    """A run_at near the end of the calendar in a zone behind UTC still exists in UTC
    (its instant is a few hours later), and is stored as that instant."""
    moment = datetime(9999, 12, 31, 10, tzinfo=timezone(timedelta(hours=-5)))
    task_id = seeded.store.enqueue("t", {}, run_at=moment)
    task = seeded.store.get(task_id)
    assert task is not None and task.run_at == moment.astimezone(UTC)
