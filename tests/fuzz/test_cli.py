"""The command line fed generated arguments and task files, on every database.

In process, through click's CliRunner, so that hundreds of invocations take seconds: no
invocation may end in an exception other than the SystemExit of a clean exit, print a
traceback, or write anything when it fails. Exit status 2 is a usage error (one
``Error:`` line naming the parameter), 1 an expected problem (one ``error:`` line), 0 a
success whose rows hold exactly what was asked. A few real subprocesses at the end show
the same from a user's shell.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import example, given
from hypothesis import strategies as st

import jobq
from jobq.cli import main
from jobq.db.durations import MAX_SECONDS, parse_duration
from jobq.dialects.schema import tasks
from tests.fuzz.conftest import Seeded, added_tasks, holder, one_line
from tests.fuzz.strategies import (
    INT32,
    Input,
    any_text,
    bad,
    either,
    fuzz,
    good,
    json_values,
    keys,
    nested,
    storable_char,
)

ROOT = Path(__file__).resolve().parents[2]


def url_of(store: jobq.Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


def invoke(args: Sequence[str]) -> Result:
    """Run ``jobq ARGS`` in process; fail on any exception but a clean SystemExit."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        pytest.fail(f"jobq {list(args)!r} raised:\n{trace}")
    assert "Traceback" not in result.output
    return result


def usage_error(result: Result) -> str:
    """The one ``Error:`` line of a click usage error (exit status 2)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.stdout == "", result.output
    return errors[0]


def failure(result: Result) -> str:
    """The one ``error:`` line of a command that failed with status 1."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return one_line(lines[0])


def refusal(result: Result) -> str:
    """The one error line of a refused command, whichever its status."""
    return usage_error(result) if result.exit_code == 2 else failure(result)


# --- jobq enqueue NAME ----------------------------------------------------------------------

#: Names click reads as NAME, not as an option: no leading dash.
cli_names = keys().filter(lambda name: not name.startswith("-"))

#: Valid JSON text for --kwargs (NaN aside), or a near miss.
KWARGS_BAD = [
    "", "{", "[1]", '"text"', "null", "1", "NaN", '{"x": NaN}', '{"x": Infinity}', "{'x': 1}",
    '{"x": 1e400}', '{"x": "\\ud800"}', '{"\\udc80": 1}', json.dumps({"x": nested(31)}),
    "[" * 100_000, '{"x": ' + "9" * 5000 + "}", '{"x": 1,}',
]  # fmt: skip


def kwargs_text(args: dict[str, Any], ascii_only: bool) -> str:
    return json.dumps(args, ensure_ascii=ascii_only)


kwargs_input = st.one_of(
    good(
        st.builds(
            kwargs_text,
            st.dictionaries(st.text(storable_char, max_size=6), json_values, max_size=3),
            st.booleans(),
        )
    ),
    bad(st.sampled_from(KWARGS_BAD)),
    either(any_text),
)


def duration_text(seconds: int, unit: str) -> str:
    size = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit.lower()]
    return f"{seconds // size}{unit}"


delay_input = st.one_of(
    good(st.builds(duration_text, st.integers(0, MAX_SECONDS), st.sampled_from("smhdwSMHDW"))),
    good(st.integers(0, MAX_SECONDS).map(str)),
    good(st.floats(0, MAX_SECONDS).map(lambda s: f"{s:.3f}")),
    good(st.sampled_from(["1h30m", "2m 5s", " 45 ", "1.5h", ".5s", "0"])),
    bad(st.sampled_from(["-1", "soon", "1e5", "inf", "nan", "", "1y", "5300w", "1h-30m"])),
    bad(st.integers(MAX_SECONDS + 1).map(str)),
    either(any_text),
)


def int_text(low: int, high: int) -> st.SearchStrategy[Input]:
    return st.one_of(
        good(st.integers(low, high).map(str)),
        bad(st.integers(max_value=low - 1).map(str) | st.integers(min_value=high + 1).map(str)),
        bad(st.sampled_from(["1.5", "x", "", "1e3", "9" * 5000])),
    )


def key_text() -> st.SearchStrategy[Input]:
    return st.one_of(
        good(keys()),
        bad(st.sampled_from(["", "k" * 256, "a\x00b", "a\ud800b", "\udcff"])),
    )


CLI_OPTIONS: dict[str, st.SearchStrategy[Input]] = {
    "--kwargs": kwargs_input,
    "--queue": key_text(),
    "--delay": delay_input,
    "--priority": int_text(*INT32),
    "--unique": st.one_of(key_text(), good(st.just("held"))),
    "--retries": int_text(0, INT32[1]),
}


@st.composite
def enqueue_lines(draw: st.DrawFn) -> tuple[Input, dict[str, Input]]:
    name = draw(
        st.one_of(good(cli_names), bad(st.sampled_from(["", "x" * 256, "a\x00", "\ud800"])))
    )
    chosen = draw(st.sets(st.sampled_from(sorted(CLI_OPTIONS)), max_size=4))
    return name, {option: draw(CLI_OPTIONS[option]) for option in sorted(chosen)}


@fuzz(60)
@given(line=enqueue_lines())
@example(line=(Input("t", True), {"--kwargs": Input('{"x": "\\ud800"}', False)}))
@example(line=(Input("t", True), {"--kwargs": Input(json.dumps({"x": nested(40)}), False)}))
@example(line=(Input("a\udcff", False), {}))  # undecodable bytes in argv, as Python reads them
@example(line=(Input("t", True), {"--queue": Input("q\x00", False)}))
def test_enqueue_prints_an_id_or_one_error_line(
    seeded: Seeded, line: tuple[Input, dict[str, Input]]
) -> None:
    """`jobq enqueue NAME --kwargs ... --queue ... --delay ...`: valid arguments print
    the new task's id (or the unique key's holder) and store exactly them; any bad one
    exits non-zero with one error line naming it, and writes nothing."""
    name, options = line
    args = ["enqueue", name.value]
    for option, value in options.items():
        args += [option, value.value]
    store = seeded.store
    held_by = holder(store, options["--unique"].value) if "--unique" in options else None
    before = seeded.tables.before()
    result = invoke([*args, "--database-url", url_of(store)])
    labels = [name.valid, *(value.valid for value in options.values())]
    if result.exit_code != 0:
        assert False in labels or None in labels, f"refused valid input: {result.output}"
        message = refusal(result)
        bad_names = ["[NAME]"] * (name.valid is False) + [
            option for option, value in options.items() if value.valid is not True
        ]
        if result.exit_code == 2:
            assert any(f"'{bad_name}'" in message for bad_name in bad_names), message
        else:  # JSON that no database stores: deep, inf, lone surrogates
            assert options.get("--kwargs", Input(None, True)).valid is not True, message
        assert seeded.tables.after() == before
        return
    assert False not in labels, f"accepted bad input: {args!r}"
    task_id = int(result.stdout)
    new = added_tasks(before, seeded.tables.after())
    if held_by is not None:
        assert (task_id, new) == (held_by, [])
        return
    assert new == [task_id]
    task = store.get(task_id)
    assert task is not None and task.name == name.value
    kwargs = options.get("--kwargs")
    assert task.args == ({} if kwargs is None else json.loads(kwargs.value))
    assert task.queue_id == options.get("--queue", Input("default", True)).value
    assert task.priority == int(options.get("--priority", Input("0", True)).value)
    assert task.retries_left == int(options.get("--retries", Input("3", True)).value)
    assert task.unique_key == options.get("--unique", Input(None, True)).value
    delay = options.get("--delay")
    waited = (task.run_at - task.created_at).total_seconds()
    wanted = 0.0 if delay is None else parse_duration(delay.value)
    assert math.isclose(waited, wanted, rel_tol=1e-9, abs_tol=0.002), (waited, wanted)


# --- jobq enqueue --file ----------------------------------------------------------------------

BAD_LINES = [
    '{"name": "b"', '["b"]', '"b"', "null", '{"kwargs": {}}', '{"name": ""}', '{"name": 7}',
    '{"name": "b", "kwargs": [1]}', '{"name": "b", "retries": -1}',
    '{"name": "b", "priority": 1.5}',
    '{"name": "b", "priority": 2147483648}', '{"name": "b", "retries": true}',
    '{"name": "b", "delay": "soon"}', '{"name": "b", "delay": -1}', '{"name": "b", "delay": 1e400}',
    '{"name": "b", "delay": ' + "1" * 400 + "}", '{"name": "b", "queue": 7}',
    '{"name": "b", "queue": "q\\u0000"}', '{"name": "b", "colour": "red"}',
    '{"name": "b", "kwargs": {"x": "\\ud800"}}', '{"name": "\\ud800"}', '{"name": "a\\u0000b"}',
    '{"name": "b", "kwargs": {"x": NaN}}', json.dumps({"name": "b", "kwargs": {"x": nested(31)}}),
    '{"name": "b", "unique": ""}', '{"name": "b"} {"name": "c"}', "not json at all",
]  # fmt: skip


@st.composite
def task_lines(draw: st.DrawFn) -> dict[str, Any]:
    """One valid --file line as a dict."""
    entry: dict[str, Any] = {"name": draw(keys())}
    if draw(st.booleans()):
        entry["kwargs"] = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=2))
    if draw(st.booleans()):
        entry["queue"] = draw(st.sampled_from(["default", "emails", "é"]))
    if draw(st.booleans()):
        entry["delay"] = draw(st.sampled_from([0, 90, 2.5, "15m", "1h30m", "2d"]))
    if draw(st.booleans()):
        entry["priority"] = draw(st.integers(*INT32))
    if draw(st.booleans()):
        entry["unique"] = draw(st.sampled_from(["held", "u1", "u2"]))
    if draw(st.booleans()):
        entry["retries"] = draw(st.integers(0, INT32[1]))
    return entry


@st.composite
def task_files(draw: st.DrawFn) -> tuple[list[str], int | None, list[dict[str, Any]]]:
    """(lines of the file, number of its bad line or None, the valid entries in order)."""
    entries = draw(st.lists(task_lines(), min_size=1, max_size=6))
    lines = [json.dumps(entry, ensure_ascii=draw(st.booleans())) for entry in entries]
    for _ in range(draw(st.integers(0, 2))):  # blank lines are skipped
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "  ", "\t"])))
    if draw(st.booleans()):
        return lines, None, entries
    position = draw(st.integers(0, len(lines)))
    lines.insert(position, draw(st.sampled_from(BAD_LINES)))
    return lines, position + 1, entries


@fuzz(40)
@given(file=task_files(), bom=st.booleans())
@example(file=(['{"name": "a"}', '{"name": "b", "delay": ' + "1" * 400 + "}"], 2, []), bom=False)
@example(file=(['{"name": "a"}', '{"name": "b", "kwargs": {"x": "\\ud800"}}'], 2, []), bom=True)
def test_enqueue_file_writes_every_line_or_none(
    seeded: Seeded,
    tmp_path_factory: pytest.TempPathFactory,
    file: tuple[list[str], int | None, list[dict[str, Any]]],
    bom: bool,
) -> None:
    """`jobq enqueue --file`: a file of valid lines (blank ones and a BOM aside) enqueues
    every line, in order, with its options, and prints the number of distinct tasks; a
    file with one bad line among good ones exits 1 with one error line giving that line's
    number, and writes nothing at all."""
    lines, bad_line, entries = file
    path = tmp_path_factory.mktemp("file") / "tasks.jsonl"
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")
    store = seeded.store
    held = {key: holder(store, key) for key in ("held", "u1", "u2")}
    before = seeded.tables.before()
    result = invoke(["enqueue", "--file", str(path), "--database-url", url_of(store)])
    if bad_line is not None:
        assert failure(result).startswith(f"error: {path} line {bad_line}: "), result.stderr
        assert seeded.tables.after() == before
        return
    assert result.exit_code == 0, result.output
    new = added_tasks(before, seeded.tables.after())
    expected, ids = [], set()
    for entry in entries:
        key = entry.get("unique")
        if key is not None and held[key] is not None:
            if held[key] > 0:
                ids.add(held[key])  # a row from before: its id is returned
            continue
        expected.append(entry)
        if key is not None:
            held[key] = 0  # held from now on, by the row this line adds (one of new)
    assert len(new) == len(expected)
    ids.update(new)
    assert result.stdout == f"enqueued {len(ids)} task{'s' * (len(ids) != 1)}\n"
    for task_id, entry in zip(new, expected, strict=True):
        task = store.get(task_id)
        assert task is not None
        assert (task.name, task.args) == (entry["name"], entry.get("kwargs", {}))
        assert task.queue_id == entry.get("queue", "default")
        assert (task.priority, task.unique_key) == (entry.get("priority", 0), entry.get("unique"))
        assert task.retries_left == entry.get("retries", 3)
        waited = (task.run_at - task.created_at).total_seconds()
        assert math.isclose(waited, parse_duration(entry.get("delay", 0)), abs_tol=0.002)


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"name": "a"}\n\xff\xfe{"name": "b"}\n', "is not UTF-8 text"),
        (b"\x00\x00\x00", "line 1: not valid JSON"),
    ],
)
def test_a_file_that_is_not_text_writes_nothing(
    seeded: Seeded, tmp_path: Path, content: bytes, fragment: str
) -> None:
    """Bytes that are no UTF-8 text, or NULs, are one error line, and nothing is written."""
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(content)
    before = seeded.tables.before()
    result = invoke(["enqueue", "--file", str(path), "--database-url", url_of(seeded.store)])
    assert fragment in failure(result)
    assert seeded.tables.after() == before


# --- ids and options of the other commands ----------------------------------------------------

id_text = st.one_of(
    st.integers(-5, 40).map(str),
    st.sampled_from(["0", "-1", str(2**63 - 1), str(2**63), str(2**64), "99999999999999999999"]),
    st.sampled_from(["abc", "1.5", "", " ", " 7 ", "0x10", "1e3", "+5", "1_0", "\u0663", "nan"]),
    any_text,
)


def parses_as_id(text: str) -> bool:
    """Whether click's IntRange(1, 2**63 - 1) takes ``text``: int() reads it, in range."""
    try:
        return 1 <= int(text) <= 2**63 - 1
    except ValueError:
        return False


@fuzz(60)
@given(command=st.sampled_from(["show", "retry", "cancel"]), task_id=id_text)
@example(command="show", task_id=str(2**63))
@example(command="cancel", task_id="-1")
def test_show_retry_cancel_take_only_ids_and_change_only_that_task(
    seeded: Seeded, command: str, task_id: str
) -> None:
    """`jobq show|retry|cancel ID`: text that is no id from 1 to 2**63-1 is a usage error
    naming ID (or the option it looks like); an id of no task, or of one in the wrong
    state, is one error line; either way nothing changes. A cancel or retry that
    succeeds changes that one task's status (cancelled, or queued again), and nothing
    else."""
    store = seeded.store
    before = seeded.tables.before()
    result = invoke([command, task_id, "--database-url", url_of(store)])
    if not parses_as_id(task_id):
        # Text that starts with a dash reads as an option, which click names instead.
        # (`retry` names its optional argument [ID].)
        expected = ("Error: Invalid value for 'ID'", "Error: Invalid value for '[ID]'")
        if task_id.startswith("-"):
            expected += ("Error: No such option",)
        assert usage_error(result).startswith(expected), result.stderr
        assert seeded.tables.after() == before
        return
    number = int(task_id)
    if result.exit_code != 0:
        failure(result)
        assert seeded.tables.after() == before
        return
    after = seeded.tables.after()
    assert {name: rows for name, rows in after.items() if name != "jobq_tasks"} == {
        name: rows for name, rows in before.items() if name != "jobq_tasks"
    }
    old_rows, new_rows = before["jobq_tasks"], after["jobq_tasks"]
    assert [row[0] for row in new_rows] == [row[0] for row in old_rows]
    changed = [(old, new) for old, new in zip(old_rows, new_rows, strict=True) if old != new]
    if command == "show":
        assert changed == [] and result.stdout.split("\n")[0].split() == ["id", str(number)]
        return
    assert [old[0] for old, _ in changed] == [number]
    status = tasks.c.keys().index("status")
    old, new = changed[0]
    if command == "cancel":
        # A running task stays running: it gets a cancel request, which its worker hears.
        requested = tasks.c.keys().index("cancel_requested_at")
        if old[status] == "in_progress":
            assert new[status] == "in_progress" and old[requested] is None is not new[requested]
            return
        assert (old[status], new[status]) in (("queued", "cancelled"), ("failed", "cancelled"))
    else:
        assert (old[status], new[status]) in (("failed", "queued"), ("cancelled", "queued"))


#: Commands that only read, or change a thing only by its exact name.
COMMANDS = [
    ["status"], ["list"], ["limits", "show"], ["cron", "list"], ["locks", "list"],
    ["cron", "run"], ["cron", "disable"], ["cron", "enable"], ["limits", "clear"],
    ["locks", "release"], ["retry", "--failed", "--queue"], ["prune", "--older-than"],
    ["list", "--status"], ["list", "--queue"], ["list", "--limit"],
]  # fmt: skip
NAMED = {"seed-cron", "limited", "seed-lock", "fail", "0"}


@fuzz(60)
@given(
    command=st.sampled_from(COMMANDS),
    values=st.lists(st.one_of(any_text, st.sampled_from(sorted(NAMED))), max_size=2),
)
@example(command=["locks", "release"], values=["\ud800"])
@example(command=["prune", "--older-than"], values=["1" * 400])
def test_other_commands_never_show_a_traceback(
    seeded: Seeded, command: list[str], values: list[str]
) -> None:
    """Every other command, given generated values where its arguments and options go,
    ends cleanly (0, or 1 or 2 with one error line) and changes nothing unless it
    succeeded."""
    store = seeded.store
    before = seeded.tables.before()
    result = invoke([*command, *values, "--database-url", url_of(store)])
    assert result.exit_code in (0, 1, 2), result.output
    if result.exit_code != 0:
        refusal(result)
        assert seeded.tables.after() == before
    else:
        seeded.tables.after()


# --- real processes -------------------------------------------------------------------------


def run_all(
    commands: list[list[str | bytes]], cwd: Path
) -> list[subprocess.CompletedProcess[bytes]]:
    """Each command as `python -m jobq.cli ...`, all at once; their outcomes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("JOBQ_DATABASE_URL", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "jobq.cli", *command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for command in commands
    ]
    try:
        done = []
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        return done
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_no_traceback_reaches_a_user(seeded: Seeded, tmp_path: Path) -> None:
    """The inputs the fuzzing above turned up, from a real shell: undecodable bytes in
    argv, JSON no database stores, a bad --file line, ids and URLs out of range. Each
    exits 1 or 2 with one error line, and the database is as it was."""
    url = url_of(seeded.store)
    delay = "1" + "0" * 400  # an int past a float's range
    (tmp_path / "tasks.jsonl").write_text(f'{{"name": "a"}}\n{{"name": "b", "delay": {delay}}}\n')
    cases: list[tuple[list[str | bytes], int, str]] = [
        (["enqueue", b"name\xff"], 2, "is not valid Unicode text"),
        (["enqueue", "t", "--kwargs", '{"x": "\\ud800"}'], 1, "lone surrogate"),
        (["enqueue", "t", "--kwargs", json.dumps({"x": nested(40)})], 1, "more than 30 levels"),
        (["enqueue", "t", "--kwargs", '{"x": 1e400}'], 1, "Out of range float values"),
        (["enqueue", "--file", "tasks.jsonl"], 1, "tasks.jsonl line 2: 'delay': "),
        (["show", str(2**64)], 2, "Invalid value for 'ID'"),
        (["limits", "set", "q", "--rate", "1" * 5000 + "/s"], 2, "above the maximum"),
    ]
    commands = [[*args, "--database-url", url] for args, _, _ in cases]
    commands.append(["status", "--database-url", "postgresql://u:pw@127.0.0.1:notaport/x"])
    commands.append(["status", "--database-url", b"sqlite:///\xff.db"])
    before = seeded.tables.before()
    done = run_all(commands, tmp_path)
    expected = [(status, text) for _, status, text in cases]
    expected += [(1, "is not valid: expected dialect://"), (1, "is not valid Unicode text")]
    for (status, text), outcome in zip(expected, done, strict=True):
        err = outcome.stderr.decode("utf-8", "replace")
        assert outcome.returncode == status, (outcome.args, err)
        assert "Traceback" not in err and text in err, (outcome.args, err)
        errors = [line for line in err.splitlines() if line.lower().startswith("error: ")]
        assert len(errors) == 1, err
        assert b"pw@" not in outcome.stderr
    assert seeded.tables.after() == before
