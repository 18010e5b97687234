"""The command line of each worker process a `jobq worker --processes N` supervisor starts."""

from __future__ import annotations

import os
import sys

from jobq.cli.run_worker import process_command, worker


def command_of(k: int, *args: str) -> list[str]:
    ctx = worker.make_context("worker", list(args))
    return process_command(ctx)(k)


def test_the_options_given_are_passed_on_and_the_defaults_are_not() -> None:
    argv = command_of(
        0, "--app", "m:app", "--processes", "4", "--queues", "a,b", "--burst",
        "--pool", "processes", "--max-tasks-per-child", "100", "--grace", "12.5",
    )  # fmt: skip
    assert argv == [
        sys.executable, "-m", "jobq.cli", "worker", "--app", "m:app", "--queues", "a,b",
        "--pool", "processes", "--max-tasks-per-child", "100", "--burst", "--grace", "12.5",
        "--supervisor-pid", str(os.getpid()),
    ]  # fmt: skip


def test_the_database_urls_are_never_on_the_command_line() -> None:
    """They may hold a password: `ps` shows argv to every user of the host."""
    argv = command_of(
        1, "--app", "m:app", "--database-url", "postgresql://u:secret@h/db?jobq_pooler=transaction",
        "--listen-url", "postgresql://u:secret2@h/db",
    )  # fmt: skip
    assert not any("secret" in arg or "-url" in arg for arg in argv)


def test_each_process_gets_its_own_worker_id_and_metrics_port() -> None:
    args = ("--app", "m:app", "--processes", "3", "--worker-id", "w", "--metrics-port", "9100")
    for k in range(3):
        argv = command_of(k, *args)
        assert argv[argv.index("--worker-id") + 1] == f"w-{k}"
        assert argv[argv.index("--metrics-port") + 1] == str(9100 + k)
        assert argv.count("--worker-id") == argv.count("--metrics-port") == 1
    assert "--processes" not in command_of(0, *args)


def test_the_rescue_interval_reaches_every_process() -> None:
    args = ("--app", "m:app", "--processes", "3", "--rescue-interval", "1")
    for k in range(3):
        argv = command_of(k, *args)
        assert argv[argv.index("--rescue-interval") + 1] == "1.0"
    assert "--rescue-interval" not in command_of(0, "--app", "m:app", "--processes", "3")
