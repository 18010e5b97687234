"""What `--help` tells a user: every option explained, `jobq worker`'s in particular."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from jobq.cli import main

ROOT = Path(__file__).resolve().parents[2]
#: An app path that parses but cannot be loaded: the worker fails (status 1) only once
#: every option was accepted, before it opens any database.
NO_APP = "no_such_module_for_jobq_tests:app"


def worker_help(cwd: Path) -> tuple[str, dict[str, str]]:
    """`jobq worker --help` as a shell prints it: its description, and what it says of
    each option (from its name to the next option), their lines joined by single spaces."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "jobq.cli", "worker", "--help"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    description, _, listed = done.stdout.partition("\nOptions:\n")
    # Each option's entry starts on a line of its own, indented by two spaces.
    entries = re.split(r"\n(?=  --)", listed)
    options = {entry.split()[0]: " ".join(entry.split()[1:]) for entry in entries}
    return " ".join(description.split()), options


def test_worker_help(tmp_path: Path) -> None:
    description, options = worker_help(tmp_path)
    assert "SIGTERM or SIGINT" in description and "gracefully" in description
    assert "A second SIGTERM or SIGINT exits at once" in description
    concurrency = options["--concurrency"]
    assert "Tasks run at once" in concurrency and "[default: 8; x>=1]" in concurrency
    poll = options["--poll-interval"]
    assert "Seconds between looks for due tasks" in poll and "default: 0.5" in poll
    log_level = options["--log-level"]
    assert log_level.startswith("[debug|info|warning|error] "), log_level
    assert "[default: info]" in log_level
    cluster = options["--tigerbeetle-cluster"]
    assert "0 to 2^128-1" in cluster and "[default: 0]" in cluster
    assert not re.search(r"\d{10}", cluster), "its range printed digit by digit"


def commands(group: click.Group, path: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """Every command under ``group``, with its name as typed: ("cron list", ...)."""
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


@pytest.mark.parametrize(("name", "command"), list(commands(main)))
def test_every_option_has_help(name: str, command: click.Command) -> None:
    bare = [
        param.opts[0]
        for param in command.params
        if isinstance(param, click.Option) and not param.help
    ]
    assert bare == [], f"jobq {name}: options without help"


@pytest.mark.parametrize("level", ["debug", "INFO", "Warning", "ERROR"])
def test_the_log_level_is_taken_in_any_case(level: str) -> None:
    result = CliRunner().invoke(main, ["worker", "--app", NO_APP, "--log-level", level])
    assert result.exit_code == 1, result.output
    assert "error: " in result.stderr and "Invalid value" not in result.stderr


@pytest.mark.parametrize("cluster", ["0", str(2**128 - 1)])
def test_every_128_bit_cluster_id_is_taken(cluster: str) -> None:
    result = CliRunner().invoke(main, ["worker", "--app", NO_APP, "--tigerbeetle-cluster", cluster])
    assert result.exit_code == 1, result.output
    assert "Invalid value" not in result.stderr


@pytest.mark.parametrize("cluster", ["-1", str(2**128), "x"])
def test_a_cluster_id_out_of_range_is_a_usage_error(cluster: str) -> None:
    result = CliRunner().invoke(main, ["worker", "--app", NO_APP, "--tigerbeetle-cluster", cluster])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--tigerbeetle-cluster'" in result.stderr
    if cluster != "x":
        assert "is not in the range 0 to 2^128-1." in result.stderr


@pytest.mark.parametrize("seconds", ["0", "-1", "soon"])
def test_a_rescue_interval_not_above_zero_is_a_usage_error(seconds: str) -> None:
    result = CliRunner().invoke(main, ["worker", "--app", NO_APP, "--rescue-interval", seconds])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--rescue-interval'" in result.stderr


#: What each command that loads an app needs besides it, to get as far as loading it.
NEEDS_BESIDES_APP = {"enqueue": ["a_task"]}
LOADING_AN_APP = [
    (name, command)
    for name, command in commands(main)
    if any(isinstance(param, click.Option) and "--app" in param.opts for param in command.params)
]


def test_the_commands_that_load_an_app_are_found() -> None:
    assert {name for name, _ in LOADING_AN_APP} >= {"worker", "enqueue"}


@pytest.mark.parametrize(("name", "command"), LOADING_AN_APP)
def test_every_command_taking_app_reads_jobq_app(name: str, command: click.Command) -> None:
    """`export JOBQ_APP=...` stands for --app in every command that takes one."""
    args = [*name.split(), *NEEDS_BESIDES_APP.get(name, [])]
    result = CliRunner().invoke(main, args, env={"JOBQ_APP": NO_APP})
    assert result.exit_code == 1, (name, result.output)
    assert f"Cannot load the app {NO_APP!r}" in result.stderr, (name, result.stderr)
